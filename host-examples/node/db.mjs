// Shared by the examples: a PgLeaseStore on DATABASE_URL, migrated, optionally in a schema
// of its own (HEART_SCHEMA, created when missing; tests use it to stay apart).
import pg from 'pg';
import { PgLeaseStore } from 'heart-fleet';

export async function openStore() {
  const url = process.env.DATABASE_URL;
  if (!url) {
    console.error('set DATABASE_URL, e.g. postgres://heart:heart@127.0.0.1:5432/heart_test');
    process.exit(2);
  }
  const schema = process.env.HEART_SCHEMA;
  if (schema && !/^[a-z_][a-z0-9_]*$/.test(schema)) throw new Error(`HEART_SCHEMA must be a plain identifier, got ${schema}`);
  if (schema) {
    const admin = new pg.Client({ connectionString: url });
    await admin.connect();
    // Two processes may create it at once: the loser's duplicate error is harmless.
    await admin.query(`CREATE SCHEMA IF NOT EXISTS ${schema}`).catch((e) => {
      if (e.code !== '23505' && e.code !== '42P06') throw e;
    });
    await admin.end();
  }
  const pool = new pg.Pool({ connectionString: url, max: 4, ...(schema ? { options: `-c search_path=${schema}` } : {}) });
  const store = new PgLeaseStore({ pool });
  await store.migrate();
  return { store, close: () => pool.end() };
}
