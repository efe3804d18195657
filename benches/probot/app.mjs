// Baseline for the ingest benchmark: a Probot app receiving the same signed deliveries.
// Probot verifies the signature and dispatches to a handler; it stores nothing.
import { serve } from "./serve.mjs";

await serve((app) => {
  app.on("issues.labeled", async () => {});
});
