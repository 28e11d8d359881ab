/**
 * Messages the engine writes or throws, as functions (like the Nest side's pg-queue.messages.ts):
 * one place to read what a user is told, and each says what happened and what to do. None
 * includes a job's payload.
 */

export const HOSTED_PASS_UNKNOWN = (name: string) => `"${String(name).slice(0, 80)}" is not a fixed-interval pass a host can run`;

export const CLUSTER_EVENT_LISTENER_FAILED = (error: unknown) =>
  `A cluster event listener (onClusterEvent) threw: ${String((error as Error)?.message ?? error).slice(0, 300)}. The event still reached the other listeners; fix the listener.`;
export const JOB_EVENT_LISTENER_FAILED = (error: unknown) =>
  `A job event listener (onJobEvent) threw: ${String((error as Error)?.message ?? error).slice(0, 300)}. The event still reached the other listeners; fix the listener.`;

export const JOB_NOT_FOUND = (id: string) => `Job ${id} does not exist.`;

export const JOB_NOT_DELETABLE = (id: string, status: string) =>
  `Job ${id} is ${status}: only succeeded, dead or cancelled jobs can be deleted. Cancel it first.`;

export const JOB_NOT_REPLAYABLE = (id: string, status: string) =>
  `Job ${id} is ${status}, not dead: only dead jobs can be replayed.${status === 'pending' || status === 'scheduled' || status === 'running' ? ' It will run (or is running) anyway.' : ''}`;

export const JOB_REFUSED = (id: string, status: string, allowed: readonly string[], verb: string) =>
  `Job ${id} is ${status}: only ${allowed.join(', ')} jobs can be ${verb}.`;

export const QUEUE_NOT_DECLARED = (queue: string, verb: 'pause' | 'resume' | 'limit' | 'read the limits of') =>
  `Queue "${String(queue).slice(0, 128)}" is not declared; nothing to ${verb}.`;

// ---------------------------------------------------------------------------------------------
// Enqueue (producer.ts, json.ts)

/** `enqueue`: the value is a job's payload (else an effect's result, whose message goes into another). */
export const PAYLOAD_NOT_JSON = (where: string, path: string, what: string, fix: string, enqueue: boolean) =>
  `${where ? `${where}: ` : ''}${path} is ${what}: ${fix}. ${enqueue ? 'Payloads' : 'Results'} are JSON: strings, numbers, booleans, null, arrays and plain objects, stored and read back as they are.${enqueue ? ' Nothing was enqueued.' : ''}`;

export const PAYLOAD_TOO_LARGE = (where: string, bytes: number, maxBytes: number) =>
  `${where}: the payload is ${bytes} bytes of JSON, over the limit of ${maxBytes}. Store large data elsewhere (a table, an object store) and enqueue a reference to it.`;

// ---------------------------------------------------------------------------------------------
// A handler's context (effects.ts, transactional-completion.ts)

export const EFFECT_NAME_REFUSED = (name: unknown) => `${JSON.stringify(String(name).slice(0, 80))} is not accepted`;

export const EFFECT_NAME_FIX = () => 'Use 1-200 letters, digits, "_", ".", ":" or "-".';

export const EFFECT_INSIDE_COMPLETE = (jobId: string, name: string) =>
  `Job ${jobId}: ctx.effect("${name}") was called inside ctx.complete's work. Call the effect before ctx.complete, and write its result in the completion's transaction.`;

export const EFFECT_RESULT_TOO_LARGE = (bytes: number, maxBytes: number) => `it is ${bytes} bytes of JSON, over ${maxBytes}`;

export const EFFECT_RESULT_NOT_STORED = (name: string, when: string, problem?: string) =>
  `Effect "${name}" happened in ${when}, but its result could not be stored${problem ? ` (${problem.slice(0, 300)})` : ''}. ` +
  'It is recorded as done and will not be called again. Return what a later attempt needs (an id, a status), not the whole response; ' +
  'with a reconcile function, a replay asks the destination for the result instead.';

export const FENCE_LOCK_TIMEOUT = (jobId: string, lockTimeoutMs: number) =>
  `Job ${jobId}: its row stayed locked for ${lockTimeoutMs} ms (an operator's cancellation?); nothing was written.`;

export const CLIENT_NOT_IN_TRANSACTION = (jobId: string) =>
  `Job ${jobId}: ctx.complete({ client }) needs a client inside a transaction: call client.query('BEGIN') first, and COMMIT after ctx.complete returns. ` +
  'Nothing was written; outside a transaction the work would commit on its own even if the completion were refused.';

// ---------------------------------------------------------------------------------------------
// A claimed attempt (lease.ts, worker.ts)

/** The message of a JobAbortedError, the reason of an aborted ctx.signal. */
export const LEASE_ABORTED = (jobId: string, why: string) => `Job ${jobId}: ${why}`;

export const LEASE_LOST_ABORT = (reason: string) => `the worker no longer owns the job (${reason})`;

export const ABORT_MARGIN_TOO_LARGE = (marginMs: number, attemptLeaseMs: number) =>
  `${marginMs} ms is more than half the lease of an attempt (${attemptLeaseMs} ms, the shorter of leaseMs and maxRuntimeMs)`;

export const ABORT_MARGIN_FIX = () => 'Use a smaller margin, or a longer lease and maximum runtime.';

/** The subjects of a worker's repeated failures in the LogThrottle (and the start of their lines). */
export const CLAIM_KIND = (queue: string) => `Claim on queue "${queue}"`;
export const WRITE_KIND = (queue: string) => `Queue "${queue}": writing a job's outcome`;

export const CLAIM_FAILED = (kind: string, reason: string) => `${kind} failed: ${reason}. Retrying at the next poll.`;

export const OUTCOME_WRITE_FAILED = (kind: string, reason: string) => `${kind} failed: ${reason}. The reaper will recover the job when its lease expires.`;

export const HANDLER_DID_NOT_STOP = (jobId: string, queue: string) => `Job ${jobId} (queue "${queue}") did not stop at shutdown; its lease is released.`;

export const WRITES_PENDING_AT_SHUTDOWN = (queue: string, timeoutMs: number) =>
  `Queue "${queue}": outcome writes still pending after ${timeoutMs} ms at shutdown; leaving them to the reaper.`;

export const START_RENEWAL_FAILED = (jobId: string, queue: string, reason: string) =>
  `Job ${jobId} (queue "${queue}"): its lease could not be renewed before it started (${reason}); it is released.`;

export const THREW_AFTER_COMPLETE = (jobId: string, queue: string) => `Job ${jobId} (queue "${queue}") threw after ctx.complete() committed; it stays succeeded.`;

export const THREW_AFTER_CLIENT_COMPLETE = (jobId: string, queue: string) =>
  `Job ${jobId} (queue "${queue}") threw after its ctx.complete() transaction committed; it stays succeeded.`;

export const COMPLETION_NOT_COMMITTED = (jobId: string) =>
  `Job ${jobId}: the handler returned after ctx.complete({ client }), but its transaction did not commit (it was rolled back, or is still open). Commit it before the handler returns.`;

export const SIGNAL_IGNORED = (jobId: string, queue: string, code: string) => `Job ${jobId} (queue "${queue}") ignored its aborted signal (${code}); its slot is freed.`;

export const HANDLER_DID_NOT_SETTLE = () => 'the handler did not settle after its signal was aborted';

// ---------------------------------------------------------------------------------------------
// The facade (pg-queue.ts)

export const QUEUE_NAME_INVALID = (queue: unknown) => `${JSON.stringify(String(queue).slice(0, 80))} is not a valid queue name`;

export const QUEUE_NAME_FIX = () => 'Use 1-128 characters: letters, digits, "_", ".", ":" or "-", starting with a letter or digit.';

export const HANDLER_TWICE = (queue: string) => `queue "${queue}" already has a handler in this process`;

export const HANDLER_AFTER_START = (queue: string) => `"${queue}" was registered after start()`;

export const STARTED_TWICE = (state: string) => `the queue is ${state}`;
export const WORKERS_NOT_STARTABLE = (state: string) => `the queue is ${state === 'new' ? 'not started' : state}`;

export const PREPARED_STATEMENT_REFUSED = (reason: string) =>
  `The server refused one of the queue's prepared statements (${reason}): its connections are most likely shared by a pooler in transaction mode (PgBouncer pool_mode = transaction), where each statement may run on another server connection. ` +
  'Set preparedStatements: false (and listenConnectionString to a direct connection for LISTEN). Until then statements of the queue fail at random.';

export const COMPLETIONS_UNWRITTEN = (timeoutMs: number) => `Completions still unwritten ${timeoutMs} ms into shutdown; the reaper will recover those jobs.`;

export const POOL_NOT_CLOSED = (timeoutMs: number) => `The pool did not close within ${timeoutMs} ms (a connection is stuck); giving up on it.`;

export const METRICS_NO_ANSWER = (timeoutMs: number) => `no answer within ${timeoutMs} ms`;

export const METRICS_DATABASE_BACK = () => 'Metrics: the database answers again; /metrics has its gauges back.';

export const METRICS_SNAPSHOT_FAILED = (problem: string) =>
  `Metrics: the database snapshot failed (${problem}); /metrics leaves out the database's gauges and reads pgqueue_database_up 0 until it answers.`;

/** `described` values below are config.ts's describe() of what was given (never a payload). */
export const JOBS_NOT_AN_ARRAY = () => 'enqueueMany expects an array of { queue, payload, options }.';

export const QUEUE_NOT_DECLARED_FOR_ENQUEUE = (queue: string) =>
  `Queue "${queue}" is not declared. Check the name, or declare it (a handler for it declares it when its worker starts; producers can declare it with declareQueues()). Nothing was enqueued.`;

export const JOB_NOT_AN_OBJECT = (where: string, described: string) => `${where} must be an object { queue, payload, options }, not ${described}.`;

export const JOB_QUEUE_NAME_INVALID = (where: string, described: string) =>
  `${where}: queue name ${described} is not valid. Use 1-128 characters: letters, digits, "_", ".", ":" or "-", starting with a letter or digit.`;

export const JOB_OPTIONS_NOT_AN_OBJECT = (where: string, described: string) => `${where}: options must be an object, not ${described}.`;

export const FLOW_NOT_A_NODE = (where: string, described: string) =>
  `${where} must be a flow node { queue, payload, options?, children?, failOnDeadChild? }, not ${described}. Nothing was enqueued.`;

export const FLOW_OPTION_REFUSED = (where: string, option: string) =>
  `${where}: option "${option}" is not for a flow's jobs (they take priority, delayMs, maxAttempts, maxRuntimeMs and group). ` +
  `Enqueue the job on its own, or leave the option out. Nothing was enqueued.`;

export const FLOW_TOO_LARGE = (max: number) =>
  `The flow has more than ${max} jobs: it is inserted in one transaction. Split it into flows of at most ${max} jobs. Nothing was enqueued.`;

export const JOB_OPTION_INVALID = (where: string, option: string, described: string, expected: string) =>
  `${where}: option "${option}" is ${described}; it must be ${expected}. Nothing was enqueued.`;

export const JOB_OPTIONS_CONFLICT = (where: string, option: string, other: string, fix: string) =>
  `${where}: option "${option}" cannot be combined with "${other}". ${fix} Nothing was enqueued.`;

export const UNIQUE_WITH_ORDERING_KEY_FIX = () =>
  'A deduplicated job would have to give back its place in the ordering key\'s count, which the key\'s statement cannot undo: ' +
  'drop orderingKey (to run a key\'s jobs one at a time, give them a group and the queue groupConcurrency: 1, docs/flow-control.md), ' +
  'or drop the deduplication.';

export const DEBOUNCE_SETS_RUN_TIME_FIX = () => 'debounce.delayMs sets the run time (moved on each enqueue of the key): drop runAt and delayMs.';

export const UNIQUE_OR_DEBOUNCE_FIX = () => 'A debounce key already keeps one waiting job per key: pick one of unique and debounce.';

export const DEBOUNCE_MERGE_NEEDS_TRANSACTION = (where: string) =>
  `${where}: debounce.merge with a client needs that client inside a transaction (BEGIN first): the merge reads the waiting job under a row lock and writes it back in the same transaction. Nothing was enqueued.`;

export const UNIQUE_RACE_ROUNDS_EXCEEDED = (rounds: number) =>
  `a unique key's holder let go of it between two statements ${rounds} times in a row (each time another producer's job took the key and was claimed or finished at once)`;

// ---------------------------------------------------------------------------------------------
// Migrations (migrator.ts). `schema` is the validated schema name.

export const MIGRATION_PENDING = (schema: string, names: readonly string[]) =>
  `Schema ${JSON.stringify(schema)} has ${names.length} pending migration(s): ${names.join(', ')}. ` +
  'Migration mode is "verify", so nothing was applied: apply them (run once with mode "auto", ' +
  'or your deploy step that migrates) before starting this version.';

export const MIGRATIONS_DIR_UNREADABLE = (dir: string, reason: string) => `cannot read directory ${JSON.stringify(dir)} (${reason})`;

export const MIGRATION_FILE_NAME_INVALID = (name: string, dir: string) => `${JSON.stringify(name)} in ${JSON.stringify(dir)} is not named NNNN_name.sql`;

export const MIGRATION_NUMBER_TAKEN = (other: string, name: string, dir: string) =>
  `${JSON.stringify(other)} and ${JSON.stringify(name)} in ${JSON.stringify(dir)} have the same number`;

export const MIGRATION_DIRECTIVE_UNKNOWN = (name: string, line: string, directive: string) =>
  `Migration ${name} has an unknown directive ${JSON.stringify(line)}. ` + `The only directive is "-- pg-queue: ${directive}"; fix or remove the line.`;

export const MIGRATE_OPTIONS_NOT_AN_OBJECT = (type: string) => `${type} is not an options object`;

export const MIGRATION_MODE_UNKNOWN = (mode: unknown) => `${JSON.stringify(String(mode).slice(0, 80))} is not a migration mode`;

export const MIGRATION_INCOMPATIBLE = (schema: string, names: readonly string[]) =>
  `Schema ${JSON.stringify(schema)} was migrated by a newer nestjs-pg-queue: its migration ${names.join(', ')} ` +
  'is marked incompatible with older versions, and this version does not know it. ' +
  'Upgrade nestjs-pg-queue in this application to the version that added it (or later).';

export const MIGRATION_EDITED = (name: string, schema: string, appliedChecksum: string, fileChecksum: string) =>
  `Migration ${name} was applied to schema ${JSON.stringify(schema)} with checksum ${appliedChecksum.slice(0, 12)}…, ` +
  `but the file now has checksum ${fileChecksum.slice(0, 12)}…: it was edited after it was applied. ` +
  'Applied migrations must never be edited: restore the file and add a new migration file with the change instead.';

export const MIGRATIONS_NEWER_COMPATIBLE = (schema: string, names: readonly string[]) =>
  `Schema ${JSON.stringify(schema)} has migration(s) this version of nestjs-pg-queue does not know: ${names.join(', ')}. ` +
  'They are marked compatible with older versions, so this process starts (a rolling deploy); upgrade it when you can.';

export const MIGRATION_FILE_FAILED = (name: string, schema: string, where: string, reason: string) =>
  `Migration ${name} failed in schema ${JSON.stringify(schema)}${where}: ${reason}. ` +
  'Its transaction was rolled back, so nothing from this file was applied; fix the file (it was never applied, so editing it is safe) and start again.';

export const MIGRATION_NOT_APPLIED = (name: string, schema: string, reason: string) =>
  `Migration ${name} could not be applied to schema ${JSON.stringify(schema)}: ${reason}. ` +
  'Nothing from this file was applied. Check that the database user may create the schema (or that it exists) and create tables in it.';

// ---------------------------------------------------------------------------------------------
// The LISTEN connection (notifier.ts)

export const CLUSTER_EVENTS_PUBLISH = (events: number, reason: string) =>
  `Publishing ${events} job events to other processes failed, and they were dropped (best effort: counted in cluster_events_dropped{reason="publish_failed"}): ${reason}`;
export const CLUSTER_EVENTS_OFF = (where: string) =>
  `${where} asks for the job events of other processes, and "events.crossProcess" is off (false, the default): nothing would ever arrive`;
export const CLUSTER_EVENTS_OFF_FIX = () => 'Set events: { crossProcess: true } (or a list of event types) in the options of every process whose events you want to hear, or listen to this process\'s events only.';
export const CLUSTER_EVENT_NOT_PUBLISHED = (where: string, type: string, types: readonly string[]) =>
  `${where} asks for "${type}" events of other processes, and "events.crossProcess" lists only ${types.map((t) => `"${t}"`).join(', ')}: none would arrive`;
export const CLUSTER_EVENT_NOT_PUBLISHED_FIX = (type: string) => `Add "${type}" to events.crossProcess (in every process whose events you want to hear), or set it to true.`;
export const LISTENER_PING_FAILED = (reason: string) => `it did not answer a query: ${reason}`;

export const LISTENER_PROBE_UNHEARD = (timeoutMs: number) => `its probe NOTIFY (sent through the pool) was not heard within ${timeoutMs} ms`;

export const LISTENER_LOST = (reason: string | undefined, reconnectMs: number) =>
  `Listener connection lost${reason ? ` (${reason})` : ''}; reconnecting in ${reconnectMs} ms. Workers keep polling meanwhile.`;

export const LISTENER_DEAF = (attempts: number) =>
  `The listener connected and LISTENed ${attempts} times in a row but never heard its probe NOTIFY, which the pool sent: its connection does not receive notifications, as through PgBouncer in transaction mode. ` +
  'Point listenConnectionString at a direct (session) connection to PostgreSQL. Until then workers find jobs only by polling, and cancels reach running handlers only at their next heartbeat.';

// ---------------------------------------------------------------------------------------------
// The library's own faults (errors.ts InternalError, store/statement.ts) and the test signals

export const INTERNAL_ERROR = (problem: string) =>
  `nestjs-pg-queue broke one of its own rules: ${problem}. This is a bug of the library, not of your code or data: please report it with this message.`;

export const STATEMENT_NAME_TOO_LONG = (name: string, max: number) => `statement name "${name}" is longer than ${max} characters`;

export const TEST_SIGNAL_TIMEOUT = (name: string, timeoutMs: number, seen: number, kept: number, dropped: number) =>
  `Test signal "${name}": no matching value within ${timeoutMs} ms (${seen} signalled, ${kept} kept unread${dropped > 0 ? `; ${dropped} older value(s) were dropped unread` : ''}).`;

export const INVALID_PAYLOAD = (queue: string, version: number, why: string) =>
  `The payload of a "${queue}" job (version ${version}) does not match its definition's schema: ${why.slice(0, 600)}. Fix the payload, or the schema in defineJob('${queue}').`;

export const JOB_VERSION_TOO_NEW = (queue: string, stored: number, known: number) =>
  `This "${queue}" job's payload is version ${stored}, newer than this handler's ${known}: a producer was deployed ahead of this worker. It is retried, for a worker that knows version ${stored}.`;

export const JOB_VERSION_UNSUPPORTED = (queue: string, stored: number, known: number) =>
  `This "${queue}" job's payload is version ${stored} and the handler knows version ${known} with no upcaster from ${stored}: add upcast: { ${stored}: (payload) => … } to the handler, deploy it, then replay the job.`;
// ---------------------------------------------------------------------------------------------
// Connecting, and start-up (pg-errors.ts, errors.ts, pg-queue.ts)

const inSeconds = (ms: number) => (ms >= 1_000 ? `${Number((ms / 1_000).toFixed(1))} s` : `${Math.round(ms)} ms`);

/** The option in a sentence: `"connectionString"`, or the pool's own settings. */
const settingsOf = (option: string | undefined) =>
  option === 'pool' ? 'the settings of the pool passed as "pool"' : option ? `"${option}"` : 'the connection settings';

/** What to check when the database cannot be reached, by the driver's error code. */
export const DATABASE_UNREACHABLE_HINT = (code: string | undefined, reason: string, option: string | undefined) => {
  const settings = settingsOf(option);
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN') {
    return `The host name does not resolve: check the host in ${settings} (a typo? a container or service name that does not exist on this network?).`;
  }
  if (code === 'ECONNREFUSED') return `Nothing accepts connections there: check that PostgreSQL is running, and the host and port in ${settings}.`;
  if (code === '53300') return 'The server has no connection slot left (max_connections): lower poolSize here or in other clients, or raise max_connections.';
  if (code === '57P03' || /starting up|in recovery mode/.test(reason)) return 'The server is starting up or recovering: it should accept connections shortly.';
  if (code === 'ETIMEDOUT' || /timeout/i.test(reason)) {
    return `No answer in time: a firewall or security group may drop the packets, or the host or port in ${settings} is not the server's.`;
  }
  return `Check that PostgreSQL is running and accepts connections from this host at that address (${settings}: network, firewall, max_connections), then try again.`;
};

export const DATABASE_GAVE_UP = (attempts: number, forMs: number) =>
  `after ${attempts} attempt${attempts === 1 ? '' : 's'} over ${inSeconds(forMs)} (startupRetryMs)`;

export const STARTUP_RETRYING = (target: string, reason: string, attempt: number, delayMs: number, leftMs: number) =>
  `The database at ${target} cannot be reached yet (${reason}): start-up attempt ${attempt} failed, trying again in ${inSeconds(delayMs)} ` +
  `(for ${inSeconds(leftMs)} more, startupRetryMs).`;

export const STARTUP_REACHED = (target: string, attempts: number, forMs: number) =>
  `The database at ${target} answered at start-up attempt ${attempts}, after ${inSeconds(forMs)}.`;

/** A connection the database refused, by its kind: what happened, and what to change. */
export const AUTH_PASSWORD_MISSING = (option: string | undefined) => [
  'the server asks for a password, and none was given (or it is not a string)',
  `Set the password in ${settingsOf(option)} (postgres://user:password@host:port/database, URL-encoded) or in PGPASSWORD; a value read from the environment may be undefined.`,
] as const;

export const AUTH_FAILED = (serverMessage: string, option: string | undefined) => [
  `${serverMessage} (SQLSTATE 28P01)`,
  `Check the user and password in ${settingsOf(option)} (special characters in a URL must be URL-encoded), and that the role may log in.`,
] as const;

export const AUTH_REJECTED = (serverMessage: string, option: string | undefined) => [
  `${serverMessage} (SQLSTATE 28000)`,
  `Check the user in ${settingsOf(option)}, and that the server's pg_hba.conf admits this user, database and host.`,
] as const;

export const DATABASE_MISSING = (serverMessage: string, option: string | undefined) => [
  `${serverMessage} (SQLSTATE 3D000)`,
  `Check the database name in ${settingsOf(option)}, or create it (CREATE DATABASE …): the queue creates its schema and tables, not the database.`,
] as const;

export const TLS_NOT_SUPPORTED = (option: string | undefined) => [
  'the connection asks for TLS, and the server does not support it',
  `Remove sslmode or ssl from ${settingsOf(option)} for this server, or enable ssl on the server.`,
] as const;

export const TLS_REQUIRED = (serverMessage: string, option: string | undefined) => [
  `${serverMessage} (SQLSTATE 28000): the server admits this connection only over TLS, or not from this host at all`,
  `Ask for TLS in ${settingsOf(option)} (sslmode=verify-full with the server's CA, or the pool's ssl option); if it still fails, pg_hba.conf has no line for this host.`,
] as const;

export const TLS_CERTIFICATE_REFUSED = (reason: string, option: string | undefined) => [
  `the server's TLS certificate was not accepted (${reason})`,
  `Give the CA that signed it (sslrootcert in ${settingsOf(option)}, or ssl: { ca } on the pool), and connect by the host name the certificate names. Turning verification off exposes the password to whoever sits in between.`,
] as const;

export const STOPPED_DURING_START = () => 'stop() was called while start() was in progress; nothing was started';

export const ENGINE_STOPPED = () =>
  'The queue engine has stopped (stop() was called, or start() failed) and its pool is closed. Whatever made this call outlived it (a timer, a request during shutdown): stop it, or create and start a new PgQueue.';

// Recurring jobs (docs/recurring-jobs.md).

export const SCHEDULE_NOT_FOUND = (name: string) => `There is no schedule named ${JSON.stringify(name)}. List them with schedules.list().`;

export const SCHEDULE_OWNED_BY_CODE = (name: string, what: string) =>
  `Schedule ${JSON.stringify(name)} is declared in code (@Recurring): only a deploy changes it, so ${what} is refused. Change or remove the decorator; an operator may pause and resume it.`;

export const SCHEDULE_NAME_TAKEN = (name: string, queue: string, takenBy: string) =>
  `Schedule ${JSON.stringify(name)} of queue "${queue}" is not declared: the name belongs to ${takenBy}. Give the @Recurring a name of its own ({ name }).`;

export const SCHEDULES_OUTRANKED = (queue: string, seenAt: Date, newestAt: Date) =>
  `The schedules this process declares for queue "${queue}" (first seen ${seenAt.toISOString()}) are older than the ones in force (first seen ${newestAt.toISOString()}): a newer release declared them, so these are left as they are. After a rollback or to bring back an earlier definition, raise its version ({ version }).`;

export const SCHEDULES_DECLARED = (queue: string, written: readonly string[], paused: readonly string[]) =>
  `Schedules of queue "${queue}": ${written.length ? `declared ${written.join(', ')}` : 'none changed'}${paused.length ? `; paused ${paused.join(', ')} (no longer declared in code)` : ''}.`;

export const SCHEDULE_WITHOUT_HANDLER = (name: string, queue: string) =>
  `the recurring schedule ${JSON.stringify(name)} is for queue "${queue}", which has no handler in this process`;

export const SCHEDULE_TICK_FAILED = (name: string, reason: string) => `Schedule ${JSON.stringify(name)}: its tick failed (${reason}); it is tried again in a minute.`;

export const SCHEDULE_TICKS_DUPLICATED = (name: string, ticks: number) =>
  `Schedule ${JSON.stringify(name)}: ${ticks} tick(s) already had a job (their unique key refused a second one); the schedule was moved back since they ran.`;
