// Issue 15: where the queue-name rule costs least (and what its regular expression costs). Per variant, a fresh schema of today's
// migrations with the rule moved; then (1) bulk enqueue of JOBS in statements of 1,000 (the
// engine's enqueue statement), (2) SINGLES one-job enqueues, (3) claims of 500 until the queue is
// empty (the engine's claim: an UPDATE of every row), (4) completions of the claimed rows in
// chunks of 125. Server time per row from pg_stat_statements; one connection, median of --runs.
//   DATABASE_URL=… node bench/probes/queue-name-rule.mjs [--runs 3] [--jobs 50000] [--variants a,b]
import pg from 'pg';
import { PgQueue } from '../../dist/engine/index.js';
import { createStore } from '../../dist/engine/store/index.js';
import { createBenchDatabase, withClient } from '../lib/db.mjs';

const args = process.argv.slice(2);
const arg = (n, d) => (args.includes(`--${n}`) ? args[args.indexOf(`--${n}`) + 1] : d);
const RUNS = Number(arg('runs', 3)), JOBS = Number(arg('jobs', 50_000)), SINGLES = 2000;
const RULE = `'^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$'`;
const dropRegexCheck = async (c, s) => {
  const { rows } = await c.query(`SELECT conname FROM pg_constraint WHERE conrelid = '${s}.jobs'::regclass AND contype = 'c' AND pg_get_constraintdef(oid) LIKE '%~%'`);
  for (const { conname } of rows) await c.query(`ALTER TABLE ${s}.jobs DROP CONSTRAINT "${conname}"`);
};
const fn = (s, body) => `CREATE FUNCTION ${s}.qn_rule() RETURNS trigger LANGUAGE plpgsql AS $f$ BEGIN ${body} END $f$`;
const VARIANTS = {
  // The migrations' CHECK (0007: a length test and an unbounded repetition), on every INSERT and UPDATE.
  check: async () => {},
  // 0001's CHECK, whose bounded repetition {0,127} PostgreSQL's regex engine expands: µs per row.
  'check-0001': async (c, s) => {
    await dropRegexCheck(c, s);
    await c.query(`ALTER TABLE ${s}.jobs ADD CONSTRAINT jobs_queue_name_check CHECK (queue_name ~ ${RULE})`);
  },
  // No rule at all on jobs (the floor).
  none: dropRegexCheck,
  // A domain: checked where a value is coerced to it (INSERT, SET queue_name), not on other UPDATEs.
  domain: async (c, s) => {
    await c.query(`CREATE DOMAIN ${s}.qn AS text`);
    await c.query(`ALTER TABLE ${s}.jobs ALTER COLUMN queue_name TYPE ${s}.qn`);
    await dropRegexCheck(c, s);
    await c.query(`ALTER DOMAIN ${s}.qn ADD CONSTRAINT qn_valid CHECK (VALUE ~ ${RULE}) NOT VALID`);
  },
  // BEFORE INSERT OR UPDATE OF queue_name, per row (a BEFORE UPDATE row trigger fetches and locks
  // the old tuple for every UPDATE, whatever its column list).
  'before-row': async (c, s) => {
    await dropRegexCheck(c, s);
    await c.query(fn(s, `IF NEW.queue_name !~ ${RULE} THEN RAISE EXCEPTION USING ERRCODE = 'check_violation', MESSAGE = 'bad queue name'; END IF; RETURN NEW;`));
    await c.query(`CREATE TRIGGER qn BEFORE INSERT OR UPDATE OF queue_name ON ${s}.jobs FOR EACH ROW EXECUTE FUNCTION ${s}.qn_rule()`);
  },
  // AFTER INSERT OR UPDATE OF queue_name, per row (queued only when the column is written).
  'after-row': async (c, s) => {
    await dropRegexCheck(c, s);
    await c.query(fn(s, `IF NEW.queue_name !~ ${RULE} THEN RAISE EXCEPTION USING ERRCODE = 'check_violation', MESSAGE = 'bad queue name'; END IF; RETURN NULL;`));
    await c.query(`CREATE TRIGGER qn AFTER INSERT OR UPDATE OF queue_name ON ${s}.jobs FOR EACH ROW EXECUTE FUNCTION ${s}.qn_rule()`);
  },
  // AFTER INSERT per statement over its transition table, plus the row trigger for UPDATE OF queue_name.
  'after-stmt': async (c, s) => {
    await dropRegexCheck(c, s);
    await c.query(fn(s, `IF EXISTS (SELECT 1 FROM inserted WHERE queue_name !~ ${RULE}) THEN RAISE EXCEPTION USING ERRCODE = 'check_violation', MESSAGE = 'bad queue name'; END IF; RETURN NULL;`));
    await c.query(`CREATE TRIGGER qn AFTER INSERT ON ${s}.jobs REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION ${s}.qn_rule()`);
  },
  // A foreign key to queues (whose name CHECK stays): an RI probe and a KEY SHARE lock per inserted row.
  fk: async (c, s) => {
    await dropRegexCheck(c, s);
    await c.query(`ALTER TABLE ${s}.jobs ADD FOREIGN KEY (queue_name) REFERENCES ${s}.queues (name)`);
  },
};

const db = await createBenchDatabase(process.env.DATABASE_URL);
const names = arg('variants', Object.keys(VARIANTS).join(',')).split(',');
const res = [];
let n = 0;
const perRow = (st, re) => {
  const r = st.find((x) => re.test(x.query));
  return r ? (1000 * r.total_exec_time) / Math.max(1, Number(r.rows)) : NaN;
};
try {
  for (let run = 0; run < RUNS; run++) {
    for (const name of names) {
      const schema = `qn_${n++}`, s = `"${schema}"`;
      const q = new PgQueue({ connectionString: db.url, schema });
      await q.migrate();
      await q.declareQueues(['bench']);
      await q.stop();
      await withClient(db.url, (c) => VARIANTS[name](c, s));
      const store = createStore(schema);
      const c = new pg.Client({ connectionString: db.url });
      await c.connect();
      await c.query('SELECT pg_stat_statements_reset()');
      const row = (i) => ({ q: 'bench', json: JSON.stringify({ i }), pr: 0, at: null, d: null, ma: null, mr: null, tc: null, k: null });
      const enq = store.statements.enqueue;
      let t0 = performance.now();
      for (let i = 0; i < JOBS; i += 1000) await store.enqueue(c, { jobs: Array.from({ length: 1000 }, (_, k) => row(i + k)), channel: 'x', schedulerTopic: 'y' });
      const bulkMs = performance.now() - t0;
      t0 = performance.now();
      for (let i = 0; i < SINGLES; i++) await c.query({ name: `${enq.name}-1`, text: enq.text, values: enq.values({ jobs: [row(i)], channel: 'x', schedulerTopic: 'y' }) });
      const singleMs = performance.now() - t0;
      await c.query(`ANALYZE ${s}.jobs`);
      const p = { queue: 'bench', owner: 'w', limit: 500, leaseMs: 30000, maxRuntimeMs: 900000, maxAttempts: 25, backoffBaseMs: 1000, backoffMaxMs: 3600000, oldestFirst: 50 };
      let got = 0;
      t0 = performance.now();
      for (;;) {
        const rows = await store.claim(c, p);
        if (!rows.length) break;
        got += rows.length;
        for (let k = 0; k < rows.length; k += 125) {
          const chunk = rows.slice(k, k + 125);
          const out = await store.completeMany(c, { ids: chunk.map((r) => r.id), tokens: chunk.map((r) => r.leaseToken), owner: 'w' });
          if (out.rows.some((r) => !r.ok)) throw new Error('refused');
        }
      }
      const drainMs = performance.now() - t0;
      await new Promise((r) => setTimeout(r, 600));
      const { rows: st } = await c.query(`SELECT query, calls, rows, total_exec_time FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())`);
      await c.end();
      if (got !== JOBS + SINGLES) throw new Error(`${name}: claimed ${got}`);
      const r = {
        name,
        bulkUs: (1000 * bulkMs) / JOBS,
        singleUs: (1000 * singleMs) / SINGLES,
        enqueueServerUs: perRow(st, /jsonb_to_recordset/),
        drainUs: (1000 * drainMs) / got,
        claimServerUs: perRow(st, /WITH open AS/),
        completeServerUs: perRow(st, /unnest\(\$1::bigint\[\], \$2::bigint\[\]\) AS t\(id, token\)/),
      };
      res.push(r);
      console.error(JSON.stringify(r));
      await withClient(db.url, async (c2) => {
        await c2.query(`DROP SCHEMA ${s} CASCADE`);
        await c2.query('CHECKPOINT');
      });
    }
  }
} finally {
  await db.drop();
}
const med = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
console.log(`jobs ${JOBS} (bulk 1000/statement) + ${SINGLES} singles; claim 500, complete 125; 1 connection; median of ${RUNS}; µs per job`);
console.log('variant      bulk wall  enqueue srv  single wall  drain wall  claim srv  complete srv');
for (const name of names) {
  const rs = res.filter((r) => r.name === name);
  const m = (k) => med(rs.map((r) => r[k])).toFixed(2);
  console.log(`${name.padEnd(12)} ${m('bulkUs').padStart(9)}  ${m('enqueueServerUs').padStart(11)}  ${m('singleUs').padStart(11)}  ${m('drainUs').padStart(10)}  ${m('claimServerUs').padStart(9)}  ${m('completeServerUs').padStart(12)}`);
}
