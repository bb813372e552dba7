// tests/e2e/lib/postgres.js — a private PostgreSQL server for a test: initdb in a temp
// directory, listening only on a Unix socket in that directory (no TCP port to collide
// with), trust authentication, fsync off (a test database need not survive power loss).
// PostgreSQL refuses to run as root: when the test runs as root, the server runs as the
// `postgres` user (Debian's package creates it) through runuser.
//
// API (async):
//   startPostgres() -> pg | { skip: "reason" }  (no PostgreSQL binaries, no postgres user)
//     pg = { url(db), createDatabase(name) -> url, psql(db, sql) -> stdout,
//            stop(), restart(), dir }
//     url(db): postgresql://latentd@/DB?host=SOCKETDIR&port=PORT (libpq's URI form)
//   stop() is fast shutdown (SIGINT) and removes the directory.
"use strict";
const fs = require("fs");
const os = require("os");
const path = require("path");
const { spawn, execFileSync } = require("child_process");

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function binDir() {
  if (process.env.PG_BINDIR) return process.env.PG_BINDIR;
  const root = "/usr/lib/postgresql";
  if (!fs.existsSync(root)) return null;
  const versions = fs.readdirSync(root).filter((v) => /^\d+$/.test(v)).sort((a, b) => b - a);
  for (const v of versions) {
    const d = path.join(root, v, "bin");
    if (fs.existsSync(path.join(d, "initdb"))) return d;
  }
  return null;
}

function asRoot() {
  return typeof process.getuid === "function" && process.getuid() === 0;
}

// argv run as the server's user: ourselves, or `postgres` when we are root.
function wrap(argv) {
  return asRoot() ? ["runuser", ["-u", "postgres", "--", ...argv]] : [argv[0], argv.slice(1)];
}

function run(argv, opts = {}) {
  const [cmd, args] = wrap(argv);
  return execFileSync(cmd, args, { stdio: ["ignore", "pipe", "pipe"], ...opts }).toString();
}

async function startPostgres() {
  const bin = binDir();
  if (!bin) return { skip: "PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb; tools/install.sh installs it)" };
  if (asRoot()) {
    try { execFileSync("id", ["postgres"], { stdio: "ignore" }); } catch { return { skip: "running as root and there is no 'postgres' user to run the server as" }; }
  }
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "latentd-pg-"));
  fs.chmodSync(dir, 0o755);
  const data = path.join(dir, "data");
  if (asRoot()) execFileSync("chown", ["postgres:", dir]);
  try {
    run([path.join(bin, "initdb"), "-D", data, "-U", "latentd", "--auth=trust", "-E", "UTF8", "--no-locale", "--no-sync"]);
  } catch (e) {
    fs.rmSync(dir, { recursive: true, force: true });
    return { skip: `initdb failed: ${e.stderr ? e.stderr.toString() : e.message}` };
  }
  const port = 20000 + Math.floor(Math.random() * 20000);
  const pg = { dir, port, proc: null };
  const logPath = path.join(dir, "postgres.log");
  pg.log = () => { try { return fs.readFileSync(logPath, "utf8"); } catch { return ""; } };
  pg.url = (db = "postgres") => `postgresql://latentd@/${db}?host=${encodeURIComponent(dir)}&port=${port}`;
  pg.psql = (db, sql) => run([path.join(bin, "psql"), "-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1", "-h", dir, "-p", String(port), "-U", "latentd", "-d", db, "-c", sql]);
  pg.start = async () => {
    const logFd = fs.openSync(logPath, "a");
    if (asRoot()) fs.fchownSync(logFd, parseInt(execFileSync("id", ["-u", "postgres"]).toString(), 10), 0);
    const [cmd, args] = wrap([path.join(bin, "postgres"), "-D", data, "-k", dir, "-p", String(port),
      "-c", "listen_addresses=", "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
      "-c", "max_connections=200", "-c", "shared_buffers=32MB"]);
    pg.proc = spawn(cmd, args, { stdio: ["ignore", logFd, logFd] });
    fs.closeSync(logFd);
    pg.exited = new Promise((resolve) => pg.proc.on("exit", resolve));
    const deadline = Date.now() + 30000;
    while (Date.now() < deadline) {
      try { pg.psql("postgres", "SELECT 1"); return; } catch { await sleep(100); }
    }
    throw new Error(`postgres did not start:\n${pg.log().slice(-3000)}`);
  };
  pg.halt = async () => {
    if (!pg.proc) return;
    // SIGINT to the postmaster itself (runuser does not pass it on): fast shutdown, which
    // aborts open sessions. Its pid is the first line of postmaster.pid.
    let pid = 0;
    try { pid = parseInt(fs.readFileSync(path.join(data, "postmaster.pid"), "utf8"), 10); } catch { /* not running */ }
    if (pid > 0) { try { process.kill(pid, "SIGINT"); } catch { /* gone */ } }
    const t = setTimeout(() => { try { if (pid > 0) process.kill(pid, "SIGKILL"); } catch { /* gone */ } pg.proc.kill("SIGKILL"); }, 10000);
    await pg.exited;
    clearTimeout(t);
    pg.proc = null;
  };
  pg.restart = async () => { await pg.halt(); await pg.start(); };
  pg.stop = async () => { await pg.halt(); fs.rmSync(dir, { recursive: true, force: true }); };
  pg.createDatabase = (name) => { pg.psql("postgres", `CREATE DATABASE ${name}`); return pg.url(name); };
  try {
    await pg.start();
  } catch (e) {
    await pg.stop();
    return { skip: e.message };
  }
  return pg;
}

module.exports = { startPostgres };
