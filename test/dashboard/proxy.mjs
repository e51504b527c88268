// proxy.mjs serves a built Cycles dashboard (its dist/ folder) and
// forwards every /v1/* and /actuator/* request to one cyclesd HTTP listener,
// as the dashboard's own nginx does for its two upstream servers: cyclesd
// answers both planes on one listener. Node built-ins only.
//
//   node test/dashboard/proxy.mjs <dist dir> <listen port> <cyclesd http://host:port>
import http from 'node:http'
import fs from 'node:fs'
import path from 'node:path'

const [dist, port, upstream] = process.argv.slice(2)
if (!dist || !port || !upstream) {
  console.error('usage: proxy.mjs <dist dir> <listen port> <upstream url>')
  process.exit(2)
}
const root = path.resolve(dist)
const target = new URL(upstream)
const types = {
  '.html': 'text/html', '.js': 'text/javascript', '.css': 'text/css', '.svg': 'image/svg+xml',
  '.png': 'image/png', '.ico': 'image/x-icon', '.json': 'application/json', '.woff2': 'font/woff2',
}

function forward(req, res) {
  const up = http.request({
    host: target.hostname, port: target.port, method: req.method, path: req.url,
    headers: { ...req.headers, host: target.host, 'x-forwarded-for': req.socket.remoteAddress },
  }, (r) => { res.writeHead(r.statusCode, r.headers); r.pipe(res) })
  up.on('error', (err) => { res.writeHead(502, { 'content-type': 'text/plain' }); res.end(String(err)) })
  req.pipe(up)
}

function serveFile(req, res) {
  const clean = path.normalize(decodeURIComponent(new URL(req.url, 'http://x').pathname)).replace(/^(\.\.[/\\])+/, '')
  let file = path.join(root, clean)
  if (!file.startsWith(root) || !fs.existsSync(file) || fs.statSync(file).isDirectory()) {
    file = path.join(root, 'index.html') // the single-page app's own routes
  }
  res.writeHead(200, { 'content-type': types[path.extname(file)] || 'application/octet-stream' })
  fs.createReadStream(file).pipe(res)
}

http.createServer((req, res) => {
  if (req.url.startsWith('/v1/') || req.url.startsWith('/actuator/')) return forward(req, res)
  serveFile(req, res)
}).listen(Number(port), '127.0.0.1', () => console.log(`dashboard on http://127.0.0.1:${port} -> ${upstream}`))
