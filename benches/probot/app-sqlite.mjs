// Baseline for the ingest benchmark: the Probot app of app.mjs that also stores each
// delivery (its id, event, action and body) in SQLite before answering, with the same
// durability settings planwright uses (WAL, synchronous=NORMAL). A redelivered id is
// stored once.
import Database from "better-sqlite3";
import { serve } from "./serve.mjs";

const db = new Database(process.env.DATABASE_PATH);
db.pragma("journal_mode = WAL");
db.pragma("synchronous = NORMAL");
db.exec(
  "CREATE TABLE IF NOT EXISTS deliveries (id TEXT PRIMARY KEY, event TEXT NOT NULL, action TEXT, payload TEXT NOT NULL, received_at INTEGER NOT NULL)",
);
const insert = db.prepare(
  "INSERT INTO deliveries (id, event, action, payload, received_at) VALUES (?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
);

await serve((app) => {
  app.on("issues.labeled", async (context) => {
    insert.run(context.id, context.name, context.payload.action, JSON.stringify(context.payload), Date.now());
  });
});
