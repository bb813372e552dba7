// paths.js — where the UI tests find Chromium, the latentd binary and their artifact folder.
"use strict";
const path = require("path");
const CHROMIUM = process.env.LATENTD_CHROMIUM || "/usr/bin/chromium";
const SOURCE = path.resolve(__dirname, "../..");
const latentdBin = () => process.env.LATENTD_BIN || path.join(SOURCE, "build", "latentd");
const artifactDir = () => process.env.LATENTD_UI_ARTIFACTS || path.join(SOURCE, "build", "ui-artifacts");
module.exports = { CHROMIUM, SOURCE, latentdBin, artifactDir };
