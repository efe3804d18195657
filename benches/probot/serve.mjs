// What both Probot baselines share: a Probot app from `handlers`, served on a free port of
// 127.0.0.1 at /webhooks/github (with /healthz), its address printed as JSON.
import { createServer } from "node:http";
import { createNodeMiddleware, createProbot } from "probot";

export async function serve(handlers) {
  const probot = createProbot({
    overrides: {
      appId: 1,
      privateKey: process.env.PRIVATE_KEY,
      secret: process.env.WEBHOOK_SECRET,
      logLevel: "warn",
    },
  });
  const middleware = await createNodeMiddleware(handlers, { probot, webhooksPath: "/webhooks/github" });
  const server = createServer((req, res) => {
    if (req.url === "/healthz") {
      res.end("ok");
      return;
    }
    middleware(req, res, () => {
      res.statusCode = 404;
      res.end();
    });
  });
  server.listen(0, "127.0.0.1", () => {
    console.log(JSON.stringify({ listening: `127.0.0.1:${server.address().port}` }));
  });
}
