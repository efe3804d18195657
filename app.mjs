// Baseline for the ingest benchmark: a Probot app receiving the same signed deliveries.
// Probot verifies the signature and dispatches to a handler; it stores nothing.
import { createServer } from "node:http";
import { createNodeMiddleware, createProbot } from "probot";

const probot = createProbot({
  overrides: {
    appId: 1,
    privateKey: process.env.PRIVATE_KEY,
    secret: process.env.WEBHOOK_SECRET,
    logLevel: "warn",
  },
});
const app = (app) => {
  app.on("issues.labeled", async () => {});
};
const middleware = await createNodeMiddleware(app, { probot, webhooksPath: "/webhooks/github" });
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
