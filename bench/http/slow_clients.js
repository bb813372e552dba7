// bench/http/slow_clients.js PORT N: hold N slow clients against 127.0.0.1:PORT, each sending
// part of a request head and then one byte a second, never the blank line. A client the
// server closes (head deadline, cap) reconnects at once, as an attacker would, so N stay
// connected in the steady state. Prints "ready" once N are connected; runs until killed.
"use strict";
const net = require("net");

const port = parseInt(process.argv[2], 10);
const n = parseInt(process.argv[3] || "2000", 10);
const socks = new Set();
let connected = 0, announced = false;

function open() {
  const s = net.connect(port, "127.0.0.1", () => {
    s.write("GET /queue HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ");
    connected++;
    if (!announced && connected >= n) { announced = true; console.log("ready"); }
  });
  s.on("error", () => {});
  s.on("close", () => { socks.delete(s); if (!stopping) setTimeout(open, 10); });
  socks.add(s);
}

let stopping = false;
process.on("SIGTERM", () => { stopping = true; for (const s of socks) s.destroy(); process.exit(0); });
for (let k = 0; k < n; k++) open();
setInterval(() => { for (const s of socks) if (s.writable) s.write("a"); }, 1000);
