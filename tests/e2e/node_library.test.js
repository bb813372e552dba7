// e2e: ComfyUI's latent and mask node families through the real server, no model needed.
//   - /object_info equals, for every class latentd registers from them, the fixtures built
//     from ComfyUI's sources by tools/comfy_object_info.py: nodes_latent_core.json (nodes.py),
//     nodes_latent.json (comfy_extras/nodes_latent.py, V3 shape: display_name null,
//     output_tooltips [null], COMBO with options), nodes_mask.json and nodes_clip_sdxl.json
//     (CLIPTextEncodeSDXLRefiner, CLIPTextEncodeSDXL: registered without a model),
//     SaveLatent/LoadLatent with LoadLatent's listing of the input folder, and the image
//     nodes: nodes_image_core.json (nodes.py), nodes_images.json, nodes_post_processing.json, nodes_compositing.json; the string, primitive and conditioning nodes;
//   - the ControlNet nodes: nodes_controlnet.json (nodes.py; registered without a model) and
//     SetUnionControlNetType (nodes_controlnet_union.json, comfy_extras/nodes_controlnet.py);
//   - GLIGENLoader and GLIGENTextBoxApply: nodes_gligen.json (nodes.py);
//   - the model merging and saving nodes: nodes_model_merging.json (registered without a model),
//     ModelMergeSD1/SD2/SDXL: nodes_model_merging_model_specific.json;
//   - HypernetworkLoader: nodes_hypernetwork.json (registered without a model);
//   - RebatchLatents and RebatchImages (nodes_rebatch.json: output_is_list true);
//   - AlignYourStepsScheduler, FreeU/FreeU_V2, RescaleCFG, PerpNeg, PerpNegGuider,
//     SelfAttentionGuidance and HyperTile (nodes_align_your_steps, nodes_sag, nodes_hypertile,
//     nodes_freelunch, nodes_model_advanced, nodes_perpneg fixtures; DualCFGGuider is compared by
//     e2e_custom_sampling with nodes_custom_sampler.json);
//   - bad input: an empty CropMask is an execution_error and the server keeps serving; a
//     mask of another size composites (resized, as ComfyUI does).
"use strict";
const { describe, it, before, after } = require("node:test");
const assert = require("node:assert/strict");
const fs = require("fs");
const path = require("path");
const L = require("./lib/latentd.js");

const FIX = path.join(L.SOURCE, "tests", "fixtures", "object_info");
const WANT = {
  "nodes_latent_core.json": ["LatentFromBatch", "RepeatLatentBatch", "LatentComposite", "LatentBlend",
    "LatentRotate", "LatentFlip", "LatentCrop", "SaveLatent", "LoadLatent"],
  "nodes_latent.json": ["LatentAdd", "LatentSubtract", "LatentMultiply", "LatentInterpolate", "LatentBatch",
    "LatentBatchSeedBehavior"],
  "nodes_mask.json": ["LatentCompositeMasked", "ImageCompositeMasked", "MaskToImage", "ImageToMask",
    "ImageColorToMask", "SolidMask", "InvertMask", "CropMask", "MaskComposite", "FeatherMask", "GrowMask",
    "ThresholdMask", "MaskPreview"],
  "nodes_clip_sdxl.json": ["CLIPTextEncodeSDXLRefiner", "CLIPTextEncodeSDXL"],
  "nodes_model_merging.json": ["ModelMergeSimple", "ModelMergeBlocks", "ModelMergeSubtract", "ModelMergeAdd",
    "CheckpointSave", "CLIPMergeSimple", "CLIPMergeSubtract", "CLIPMergeAdd", "CLIPSave", "VAESave", "ModelSave"],
  "nodes_model_merging_model_specific.json": ["ModelMergeSD1", "ModelMergeSD2", "ModelMergeSDXL"],
  "nodes_hypernetwork.json": ["HypernetworkLoader"],
  "nodes_controlnet.json": ["ControlNetApply", "ControlNetApplyAdvanced", "ControlNetLoader",
    "DiffControlNetLoader"],
  "nodes_controlnet_union.json": ["SetUnionControlNetType"],
  "nodes_gligen.json": ["GLIGENLoader", "GLIGENTextBoxApply"],
  "nodes_image_core.json": ["SaveImage", "PreviewImage", "LoadImageMask", "ImageScale", "ImageScaleBy",
    "ImageInvert", "ImageBatch", "ImagePadForOutpaint", "EmptyImage"],
  "nodes_images.json": ["ImageCrop", "RepeatImageBatch", "ImageFromBatch", "ImageAddNoise", "ImageStitch",
    "ResizeAndPadImage",
    "GetImageSize",
    "ImageRotate", "ImageFlip", "ImageScaleToMaxDimension"],
  "nodes_post_processing.json": ["ImageBlend", "ImageBlur", "ImageSharpen", "ImageScaleToTotalPixels"],
  "nodes_compositing.json": ["PorterDuffImageComposite", "SplitImageWithAlpha", "JoinImageWithAlpha"],
  "nodes_string.json": ["StringConcatenate", "StringSubstring", "StringLength", "CaseConverter", "StringTrim",
    "StringReplace", "StringContains", "StringCompare", "RegexMatch", "RegexExtract", "RegexReplace"],
  "nodes_primitive.json": ["PrimitiveString", "PrimitiveStringMultiline", "PrimitiveInt", "PrimitiveFloat",
    "PrimitiveBoolean"],
  "nodes_conditioning.json": ["ConditioningAverage", "ConditioningCombine", "ConditioningConcat",
    "ConditioningSetArea", "ConditioningSetAreaPercentage", "ConditioningSetAreaStrength", "ConditioningSetMask",
    "ConditioningZeroOut", "ConditioningSetTimestepRange"],
  "nodes_upscale_model.json": ["UpscaleModelLoader", "ImageUpscaleWithModel"],
  "nodes_align_your_steps.json": ["AlignYourStepsScheduler"],
  "nodes_freelunch.json": ["FreeU", "FreeU_V2"],
  "nodes_model_advanced.json": ["ModelSamplingDiscrete", "ModelSamplingContinuousEDM",
    "ModelSamplingContinuousV", "RescaleCFG"],
  "nodes_perpneg.json": ["PerpNeg", "PerpNegGuider"],
  "nodes_sag.json": ["SelfAttentionGuidance"],
  "nodes_hypertile.json": ["HyperTile"],
  "nodes_rebatch.json": ["RebatchLatents", "RebatchImages"],
};

let S = null;

async function run(prompt, id) {
  const c = await L.openWs(S, { clientId: id });
  try {
    const r = await L.postPrompt(S, prompt, { client_id: id, prompt_id: id });
    assert.equal(r.status, 200, r.text);
    await c.waitFor((m) => m.type === "executing" && m.data.node === null, 30000);
    return c.messages;
  } finally {
    await c.close();
  }
}

describe("latent and mask nodes", () => {
  // LoadLatent's combo lists the input folder's .latent files, sorted (nothing else).
  const LATENTS = ["a.latent", "b.latent"];
  before(async () => {
    S = await L.startLatentd({
      setup(dir) {
        for (const f of ["b.latent", "a.latent", "x.png"]) fs.writeFileSync(path.join(dir, "input", f), "");
      },
    });
  });
  after(async () => {
    if (!S) return;
    const r = await S.stop();
    const log = S.log();
    L.removeDir(S.dir);
    assert.deepEqual(r, { code: 0, signal: null }, log.slice(-3000));
  });

  it("/object_info equals ComfyUI's entries", async () => {
    const info = (await L.request(S, "GET", "/object_info")).json();
    for (const [file, classes] of Object.entries(WANT)) {
      const want = JSON.parse(fs.readFileSync(path.join(FIX, file), "utf8"));
      for (const c of classes) {
        assert.ok(info[c], `${c} is registered`);
        if (c === "LoadLatent") want[c].input.required.latent[0] = LATENTS; // "$INPUT_LATENTS"
        // "$UPSCALE_MODELS": models/upscale_models is empty here (e2e_upscale_model lists files)
        if (c === "UpscaleModelLoader") want[c].input.required.model_name[1].options = [];
        if (c === "LoadImageMask") want[c].input.required.image[0] = ["x.png"]; // the input images
        if (c === "ControlNetLoader" || c === "DiffControlNetLoader")
          want[c].input.required.control_net_name[0] = []; // "$CONTROLNET": models/controlnet is empty
        if (c === "GLIGENLoader") want[c].input.required.gligen_name[0] = []; // "$GLIGEN": likewise
        if (c === "HypernetworkLoader") want[c].input.required.hypernetwork_name[0] = []; // likewise
        assert.deepEqual(info[c], want[c], c);
      }
    }
  });

  it("bad input: ComfyUI's errors or clear ones, server up", async () => {
    const msgs = await run({
      1: { class_type: "SolidMask", inputs: { value: 1, width: 8, height: 8 } },
      2: { class_type: "CropMask", inputs: { mask: ["1", 0], x: 9, y: 0, width: 4, height: 4 } },
      3: { class_type: "MaskToImage", inputs: { mask: ["2", 0] } },
      4: { class_type: "PreviewImage", inputs: { images: ["3", 0] } },
    }, "bad-crop");
    const err = msgs.find((m) => m.type === "execution_error");
    assert.ok(err, "execution_error");
    assert.equal(err.data.node_type, "CropMask");
    const ok = await run({
      1: { class_type: "EmptyImage", inputs: { width: 16, height: 8, batch_size: 1, color: 0 } },
      2: { class_type: "EmptyImage", inputs: { width: 4, height: 4, batch_size: 1, color: 0xffffff } },
      3: { class_type: "SolidMask", inputs: { value: 0.5, width: 100, height: 30 } },
      4: { class_type: "ImageCompositeMasked", inputs: { destination: ["1", 0], source: ["2", 0], x: 2, y: 2,
        resize_source: false, mask: ["3", 0] } },
      5: { class_type: "PreviewImage", inputs: { images: ["4", 0] } },
    }, "mask-size");
    assert.ok(ok.some((m) => m.type === "executed" && m.data.node === "5"), JSON.stringify(ok.filter((m) => m.type === "execution_error")));
    assert.equal((await L.request(S, "GET", "/system_stats")).status, 200);
  });
});
