/*
 * The lease protocol of nestjs-pg-queue, for the spin model checker (docs/how-we-know.md).
 *
 * Read it beside lib/engine/store/ (claim.ts, finish.ts, fence.ts, maintenance.ts, operator.ts,
 * enqueue.ts): each statement of the store is one atomic step here, named
 * after it ("claim", "complete-many", ...), because PostgreSQL runs a statement atomically under
 * its row locks. A transaction of several statements is one step where nothing else can see its
 * middle (complete-many + promote-key-heads); ctx.complete's transaction is three steps, because
 * its clock and its row lock are what matter (BEGIN, lock-fence, complete-many + COMMIT).
 *
 * Time is the database clock, kept relative: every timestamp a row or a worker holds is stored as
 * "ticks left" until it, and the Clock process advances time by decrementing them all (saturating
 * at 0 = "<= now()"). So time is unbounded while the state space stays finite.
 *
 * Tokens are compared only for equality, and every claim makes a new one ("lease_token + 1",
 * never reset), so what a worker needs to know of its token is one bit: is it still the row's
 * current lease_token (cur[w])? A claim makes the claimant's token current and every other
 * worker's token for that job stale. Exact for every comparison the code makes, for any number
 * of claims (no bound on tokens).
 *
 * One process (one lease_owner) runs the worker slots, so the fence's owner comparison never
 * tells two of them apart: only the token does (the harder case; a second owner adds refusals).
 *
 * Mutants (each a defect of issue 11 put back): -DMUTANT_D9, -DMUTANT_D6, -DMUTANT_D3,
 * -DMUTANT_D16, -DMUTANT_NO_TOKEN; and -DMUTANT_NO_END_EXPIRED_CANCELS, which the liveness
 * property must catch. -DLIVENESS adds the "calm" phase the liveness property needs.
 */

/* ---- bounds (scripts/verify.mjs sets them; these are the defaults) ---- */
#ifndef NW
#define NW 2          /* worker slots of one process: one owner, one completer */
#endif
#ifndef NKEYED
#define NKEYED 2      /* jobs 0..NKEYED-1 share one ordering key; the others have none */
#endif
#ifndef NJ
#define NJ 3
#endif
#ifndef L
#define L 2           /* leaseMs, in ticks */
#endif
#ifndef D
#define D 3           /* maxRuntimeMs, in ticks */
#endif
#ifndef MA
#define MA 2          /* maxAttempts */
#endif
#ifndef OPS
#define OPS 1         /* operator actions (cancel, replay, discard, delete), besides one pause */
#endif
#define READY ((L + 1) / 2) /* a buffered job starts at once with this much lease left (renewBelowMs) */

/* job_status, as migrations/0001_jobs.sql has it; ABSENT = no row (not yet committed, or deleted) */
#define ABSENT 0
#define SCHEDULED 1
#define PENDING 2
#define RUNNING 3
#define SUCCEEDED 4
#define DEAD 5
#define CANCELLED 6

/* audit kinds (job_events.kind) */
#define K_RETRY 1
#define K_DEAD 2
#define K_LEASE_EXPIRED 3
#define K_RELEASED 4
#define K_CANCELLED 5
#define K_DISCARDED 6
#define K_REPLAYED 7

/* who changes a status: only replay and discard may leave a terminal state */
#define BY_ENGINE 0
#define BY_REPLAY 1
#define BY_DISCARD 2

/* worker phases */
#define IDLE 0
#define BUF 1        /* claimed, waiting in the prefetch buffer */
#define RUN 2        /* its handler runs */
#define TXOPEN 3     /* ctx.complete: BEGIN done, row not locked yet */
#define TXLOCKED 4   /* ctx.complete: lock-fence holds the row */
#define WAITC 5      /* its success is with the completer */
#define ENDC 6       /* a cancelled attempt is over: end-cancelled-attempt next */

/* ---- the jobs table ---- */
byte st[NJ];          /* status */
bool hasl[NJ];        /* lease_expires_at IS NOT NULL */
byte exl[NJ];         /* ticks until lease_expires_at */
byte dl[NJ];          /* ticks until deadline_at */
byte att[NJ];         /* attempt_count */
byte avail[NJ];       /* ticks until available_at (scheduled jobs) */
bool kw[NJ];          /* key_waiting */
bool paused;          /* queues.paused_at IS NOT NULL */
/* ordering_keys and key_handoffs, for the one key */
byte kcount;          /* ordering_keys.unfinished */
bool kheld;           /* a producer's transaction holds the key's row */
byte handoff;         /* key_handoffs.n waiting for the KeyHandoffs pass */
bool uncommitted;     /* the producer's job is inserted, not yet committed */
bool produced;        /* ... and committed */

/* ---- each worker slot ---- */
byte wpc[NW];         /* phase */
byte wj[NW];          /* its job */
bool cur[NW];         /* its token is the row's current lease_token */
byte wlost[NW];       /* a refused heartbeat told it: 1 lease lost, 2 cancelled */
#ifdef MUTANT_D6
bool txlive[NW];      /* the lease was live at BEGIN: what now() says inside the transaction */
#endif
bool cq[NW];          /* its completion waits in the completer */
byte cres[NW];        /* the completer's answer: 1 applied, 2 refused (cancelled), 3 refused */

/* ---- ghosts: what the properties talk about, never read by the protocol ---- */
bool succ[NJ];        /* a success was applied */
byte sby[NJ];         /* ... under the token of this worker (+1) */
byte cexl[NJ];        /* a cancelled attempt not over yet (its worker has not ended it): its lease's ticks left */
bool deleted[NJ];
bool started;         /* init has set up the jobs */
bool calm;            /* LIVENESS: from now on no crash, and no pause past a buffered lease */
byte from_;           /* scratch of one atomic step (always reset to 0) */
byte k_;              /* scratch of one atomic step (always reset to 0) */

#define KEYED(j) ((j) < NKEYED)
#define LIVE(j) (hasl[j] && exl[j] > 0)
#define TERMINAL(s) ((s) == SUCCEEDED || (s) == DEAD || (s) == CANCELLED)
/* holdsKey() in store/finish.ts: unfinished, or cancelled while its attempt may still run */
#define HOLDS(j) ((st[j] >= SCHEDULED && st[j] <= RUNNING) || st[j] == DEAD || (st[j] == CANCELLED && hasl[j]))
#define HEAD(j) (KEYED(j) && !kw[j] && HOLDS(j))
#define WAITING(j) (KEYED(j) && kw[j] && (st[j] == SCHEDULED || st[j] == PENDING))
#define MIN(a, b) ((a) < (b) -> (a) : (b))
/* the lease the worker knows it has, by its monotonic timer: the row's while its token is current */
#define WL(w) ((cur[w] && hasl[wj[w]]) -> exl[wj[w]] : 0)

/* fence() in store/fence.ts: id + token + owner + status 'running' + lease_expires_at > clock_timestamp() */
#define FENCE_AT(w, live) (cur[w] && st[wj[w]] == RUNNING && (live))
#define FENCE(w) FENCE_AT(w, LIVE(wj[w]))
/* MUTANT_D6: inside a transaction the fence compares with now(), frozen at BEGIN */
#ifdef MUTANT_D6
#define TXLIVE(w) txlive[w]
#else
#define TXLIVE(w) LIVE(wj[w])
#endif
/* complete-many matches (id, token); MUTANT_NO_TOKEN matches the id only */
#ifdef MUTANT_NO_TOKEN
#define TOKMATCH(w) true
#else
#define TOKMATCH(w) cur[w]
#endif

#if NW == 2
#define LOCKED(j) ((wpc[0] == TXLOCKED && wj[0] == j) || (wpc[1] == TXLOCKED && wj[1] == j))
#define ANY_BUF (wpc[0] == BUF || wpc[1] == BUF)
#define CQ_READY ((cq[0] || cq[1]) && (!cq[0] || !LOCKED(wj[0])) && (!cq[1] || !LOCKED(wj[1])))
#else
#define LOCKED(j) ((wpc[0] == TXLOCKED && wj[0] == j) || (wpc[1] == TXLOCKED && wj[1] == j) || (wpc[2] == TXLOCKED && wj[2] == j))
#define ANY_BUF (wpc[0] == BUF || wpc[1] == BUF || wpc[2] == BUF)
#define CQ_READY ((cq[0] || cq[1] || cq[2]) && (!cq[0] || !LOCKED(wj[0])) && (!cq[1] || !LOCKED(wj[1])) && (!cq[2] || !LOCKED(wj[2])))
#endif
/* ANYJ: some job has P; PICKJ: any one of them; ALLJ: every job has P */
#if NJ == 1
#define ANYJ(P) P(0)
#define ALLJ(P) P(0)
#define PICKJ(P, v) v = 0
#elif NJ == 2
#define ANYJ(P) (P(0) || P(1))
#define ALLJ(P) (P(0) && P(1))
#define PICKJ(P, v) if :: P(0) -> v = 0 :: P(1) -> v = 1 fi
#elif NJ == 3
#define ANYJ(P) (P(0) || P(1) || P(2))
#define ALLJ(P) (P(0) && P(1) && P(2))
#define PICKJ(P, v) if :: P(0) -> v = 0 :: P(1) -> v = 1 :: P(2) -> v = 2 fi
#else
#define ANYJ(P) (P(0) || P(1) || P(2) || P(3))
#define ALLJ(P) (P(0) && P(1) && P(2) && P(3))
#define PICKJ(P, v) if :: P(0) -> v = 0 :: P(1) -> v = 1 :: P(2) -> v = 2 :: P(3) -> v = 3 fi
#endif
/* a job of the key runs: running, or cancelled while its attempt is not over (by its worker or the clock) */
#define KRUN(j) (KEYED(j) && (st[j] == RUNNING || cexl[j] > 0))
#if NKEYED == 0
#define ANYHEAD false
#define TWO_RUN false
#define UNFINISHED 0
#define DEAD_HEAD false
#elif NKEYED == 1
#define ANYHEAD HEAD(0)
#define TWO_RUN false
#define UNFINISHED (KEYED(0) && HOLDS(0))
#define DEAD_HEAD (!kw[0] && st[0] == DEAD)
#elif NKEYED == 2
#define ANYHEAD (HEAD(0) || HEAD(1))
#define TWO_RUN (KRUN(0) && KRUN(1))
#define UNFINISHED ((KEYED(0) && HOLDS(0)) + (KEYED(1) && HOLDS(1)))
#define DEAD_HEAD ((!kw[0] && st[0] == DEAD) || (!kw[1] && st[1] == DEAD))
#else
#define ANYHEAD (HEAD(0) || HEAD(1) || HEAD(2))
#define TWO_RUN ((KRUN(0) && KRUN(1)) || (KRUN(0) && KRUN(2)) || (KRUN(1) && KRUN(2)))
#define UNFINISHED ((KEYED(0) && HOLDS(0)) + (KEYED(1) && HOLDS(1)) + (KEYED(2) && HOLDS(2)))
#define DEAD_HEAD ((!kw[0] && st[0] == DEAD) || (!kw[1] && st[1] == DEAD) || (!kw[2] && st[2] == DEAD))
#endif

/* A status change; terminal states change only by replay (dead -> pending) or discard (dead -> cancelled). */
inline set_status(j, s, by) {
  assert(!TERMINAL(st[j]) || (st[j] == DEAD && ((s == PENDING && by == BY_REPLAY) || (s == CANCELLED && by == BY_DISCARD))));
  st[j] = s
}
/* attempt_count is read only while a job can still run (replay resets it): the model forgets it after */
inline settle_attempts(j) {
  if :: TERMINAL(st[j]) -> att[j] = 0 :: else fi
}

/* The audit row a statement writes in the same statement (its CTE), checked against the transition. */
inline audit(j, kind, from, to) {
  assert(to == st[j]);
  assert((kind == K_RETRY && from == RUNNING && (to == SCHEDULED || to == PENDING))
      || (kind == K_DEAD && from == RUNNING && to == DEAD)
      || (kind == K_LEASE_EXPIRED && from == RUNNING && to == SCHEDULED)
      || (kind == K_RELEASED && from == RUNNING && (to == PENDING || to == DEAD))
      || (kind == K_CANCELLED && (from == SCHEDULED || from == PENDING || from == RUNNING) && to == CANCELLED)
      || (kind == K_DISCARDED && from == DEAD && to == CANCELLED)
      || (kind == K_REPLAYED && from == DEAD && to == PENDING))
}

/* Every write under a token: applied only under the current token and a lease live by the clock. */
inline fenced_write(w) {
  assert(cur[w] && st[wj[w]] == RUNNING && LIVE(wj[w]))
}

inline clear_lease(j) {
  hasl[j] = false; exl[j] = 0; dl[j] = 0
}

/* promote-key-heads: the key has no head any more -> its lowest waiting job becomes the head. */
inline promote_key_heads() {
  if
  :: !ANYHEAD ->
     if
     :: WAITING(0) -> kw[0] = false
#if NKEYED > 1
     :: !WAITING(0) && WAITING(1) -> kw[1] = false
#endif
#if NKEYED > 2
     :: !WAITING(0) && !WAITING(1) && WAITING(2) -> kw[2] = false
#endif
     :: else
     fi
  :: else
  fi
}

/* releaseKeys(): the key row is locked SKIP LOCKED; if a producer holds it, the release is handed off. */
inline release_key(j) {
  if
  :: KEYED(j) && !kheld -> kcount--
  :: KEYED(j) && kheld -> handoff++
  :: else
  fi
}

/* complete-many's effect on one row, under worker w's token, checked as a success */
inline apply_success(w) {
  assert(!succ[wj[w]]);                                     /* at most once */
  assert(cur[w] && LIVE(wj[w]) && st[wj[w]] == RUNNING);    /* current token, lease live by the clock now */
  set_status(wj[w], SUCCEEDED, BY_ENGINE);
  hasl[wj[w]] = false; exl[wj[w]] = 0; dl[wj[w]] = 0;       /* lease_expires_at = NULL */
  succ[wj[w]] = true; sby[wj[w]] = w + 1; settle_attempts(wj[w]);
  release_key(wj[w])
}

/* A worker slot forgets its job. */
inline forget(w) {
  wpc[w] = IDLE; wj[w] = 0; cur[w] = false; wlost[w] = 0
}

/* ------------------------------------------------------------------------------------------ */

active proctype Clock() {
  do
  /* tick: the database clock advances */
  :: d_step {
#ifdef LIVENESS
       !(calm && ANY_BUF) ->       /* once calm, a buffered job starts before its lease runs out */
#endif
       k_ = 0;
       do
       :: k_ < NJ ->
          if :: exl[k_] > 0 -> exl[k_]-- :: else fi;
          if :: dl[k_] > 0 -> dl[k_]-- :: else fi;
          if :: avail[k_] > 0 -> avail[k_]-- :: else fi;
          if :: cexl[k_] > 0 -> cexl[k_]-- :: else fi;
          k_++
       :: else -> break
       od;
       k_ = 0
     }
  od
}

#ifdef LIVENESS
#define CRASH_OK (!calm)
active proctype Calm() {
  /* calm: from here on, no crash, and no pause past a buffered job's lease */
  atomic { calm = true }
}
#else
#define CRASH_OK true
#endif

#define CLAIMABLE(j) (st[j] == PENDING && !kw[j])

/* A worker slot: claim, buffer, run, finish. It may pause (not be scheduled) and crash at any step. */
proctype Worker(byte w) {
  byte j;
end:
  do
  /* claim: one statement, lease_token + 1, the lease and the deadline from now(); a paused queue claims nothing */
  :: atomic {
       wpc[w] == IDLE && !paused && ANYJ(CLAIMABLE) ->
       PICKJ(CLAIMABLE, j);
       k_ = 0;
       do :: k_ < NW -> if :: wj[k_] == j -> cur[k_] = false :: else fi; k_++ :: else -> break od;
       k_ = 0;
       set_status(j, RUNNING, BY_ENGINE); att[j]++;
       dl[j] = D; hasl[j] = true; exl[j] = MIN(L, D);
       wj[w] = j; cur[w] = true; wpc[w] = BUF; j = 0
     }
  /* dispatch: enough lease left, the handler starts at once (MUTANT_D3: whatever is left) */
  :: atomic {
#ifdef MUTANT_D3
       wpc[w] == BUF ->
#else
       wpc[w] == BUF && WL(w) >= READY ->
#endif
       /* a handler starts only under a lease it holds, live by the clock */
       assert(cur[w] && LIVE(wj[w]));
       wpc[w] = RUN
     }
  /* start-attempt: a job that waited too long in the buffer is renewed under the fence first */
  :: atomic {
       wpc[w] == BUF && WL(w) < READY && !LOCKED(wj[w]) ->
       if
       :: FENCE(w) ->
          fenced_write(w);
          dl[wj[w]] = D; exl[wj[w]] = MIN(L, D); wpc[w] = RUN
       :: !FENCE(w) && st[wj[w]] == CANCELLED -> wpc[w] = ENDC
       :: else -> forget(w)
       fi
     }
  /* release (bufferedExpiry): its lease ran out in the buffer; not started, the attempt is given back */
  :: atomic {
       wpc[w] == BUF && WL(w) == 0 && !LOCKED(wj[w]) ->
       if
       :: FENCE(w) ->
          fenced_write(w);
          set_status(wj[w], PENDING, BY_ENGINE);
          att[wj[w]]--; clear_lease(wj[w]);
          audit(wj[w], K_RELEASED, RUNNING, PENDING)
       :: else
       fi;
       forget(w)
     }
  /* heartbeat: after progress, throttled, to a full lease but never past the deadline */
  :: atomic {
       wpc[w] == RUN && wlost[w] == 0 && WL(w) < L && !LOCKED(wj[w]) ->
       if
       :: FENCE(w) -> fenced_write(w); exl[wj[w]] = MIN(L, dl[wj[w]])
       :: !FENCE(w) && st[wj[w]] == CANCELLED && cur[w] -> wlost[w] = 2
       :: else -> wlost[w] = 1
       fi
     }
  /* settle after a lost fence: the handler settles, nothing is written; a cancelled attempt is ended */
  :: atomic {
       wpc[w] == RUN && wlost[w] != 0 ->
       if
       :: wlost[w] == 2 -> wpc[w] = ENDC; wlost[w] = 0
       :: else -> forget(w)
       fi
     }
  /* to the completer: the handler succeeded; its completion waits for a batched complete-many */
  :: atomic { wpc[w] == RUN && wlost[w] == 0 -> cq[w] = true; wpc[w] = WAITC }
  /* BEGIN (ctx.complete): the handler opens the transaction; its now() is frozen from here */
  :: atomic {
       wpc[w] == RUN && wlost[w] == 0 ->
#ifdef MUTANT_D6
       txlive[w] = LIVE(wj[w]);
#endif
       wpc[w] = TXOPEN
     }
  /* fail: the handler failed; fenced; dead when permanent or out of attempts, else a retry */
  :: atomic {
       wpc[w] == RUN && wlost[w] == 0 && !LOCKED(wj[w]) ->
       j = wj[w];
       if
       :: FENCE(w) ->
          fenced_write(w);
          if
          :: true -> set_status(j, DEAD, BY_ENGINE)             /* permanent, or att >= MA */
          :: att[j] < MA -> set_status(j, PENDING, BY_ENGINE)   /* retry now */
          :: att[j] < MA -> set_status(j, SCHEDULED, BY_ENGINE); avail[j] = 1 /* retry later */
          fi;
          clear_lease(j);
          audit(j, (st[j] == DEAD -> K_DEAD : K_RETRY), RUNNING, st[j]);
          settle_attempts(j);
          forget(w)
       :: !FENCE(w) && st[j] == CANCELLED -> wpc[w] = ENDC
       :: else -> forget(w)
       fi;
       j = 0
     }
  /* lock-fence (ctx.complete): the fence as a row lock (SKIP LOCKED: a held row is tried again) */
  :: atomic {
       wpc[w] == TXOPEN && !LOCKED(wj[w]) ->
       if
       :: FENCE_AT(w, TXLIVE(w)) -> wpc[w] = TXLOCKED
       :: !FENCE_AT(w, TXLIVE(w)) && st[wj[w]] == CANCELLED -> wpc[w] = ENDC
       :: else -> forget(w)
       fi;
#ifdef MUTANT_D6
       if :: wpc[w] != TXLOCKED -> txlive[w] = false :: else fi
#endif
     }
  /* complete-many + COMMIT (ctx.complete): the work is done; complete-many, promote-key-heads, COMMIT */
  :: atomic {
       wpc[w] == TXLOCKED ->
       if
       :: FENCE_AT(w, TXLIVE(w)) && TOKMATCH(w) -> apply_success(w); promote_key_heads()
       :: else /* we hold the row, so only time refuses it: the work rolls back */
       fi;
#ifdef MUTANT_D6
       txlive[w] = false;
#endif
       forget(w)
     }
  /* outcome: the completer's answer for this slot's own (id, token) */
  :: atomic {
       wpc[w] == WAITC && cres[w] != 0 ->
       if
       :: cres[w] == 1 -> assert(succ[wj[w]] && sby[wj[w]] == w + 1)
       :: else -> assert(!(succ[wj[w]] && sby[wj[w]] == w + 1))
       fi;
       if
       :: cres[w] == 2 -> wpc[w] = ENDC
       :: else -> forget(w)
       fi;
       cres[w] = 0
     }
  /* end-cancelled-attempt: the handler of a cancelled job settled (or never started) */
  :: atomic {
       wpc[w] == ENDC ->
       j = wj[w];
       if
       :: st[j] == CANCELLED && cur[w] && hasl[j] -> clear_lease(j); release_key(j); promote_key_heads()
       :: else
       fi;
       cexl[j] = 0;
       forget(w); j = 0
     }
  /* crash: everything this slot knew is gone (also: a handler that never settles) */
  :: atomic {
       wpc[w] != IDLE && CRASH_OK ->     /* a ctx.complete transaction aborts: its row lock goes */
       cq[w] = false; cres[w] = 0;
#ifdef MUTANT_D6
       txlive[w] = false;
#endif
       forget(w)
     }
  od
}

/* The completer: the completions waiting now, in one complete-many (and promote-key-heads). */
active proctype Completer() {
  byte w, v, done;   /* done: the rows this complete-many updated, a bit per job */
end:
  do
  /* complete-many: the completions waiting now, each row fenced on its own */
  :: atomic {
       CQ_READY ->    /* the UPDATE waits for a row a ctx.complete transaction holds */
       /* the UPDATE: each row once, if an input (id, token) matches it and the fence holds */
       w = 0;
       do
       :: w < NW ->
          if
          :: cq[w] && !(done & (1 << wj[w])) && st[wj[w]] == RUNNING && LIVE(wj[w]) && TOKMATCH(w) ->
             /* the row's current token is an input's: that input's success is applied */
             v = 0;
             do
             :: v < NW -> if :: cq[v] && wj[v] == wj[w] && cur[v] -> break :: else -> v++ fi
             :: else -> break
             od;
             assert(v < NW);
             apply_success(v);
             done = done | (1 << wj[w])
          :: else
          fi;
          w++
       :: else -> break
       od;
       promote_key_heads();
       /* each input's outcome: applied = (id, token) IN done (MUTANT_D16: by id, the last row wins) */
       w = 0;
       do
       :: w < NW ->
          if
          :: cq[w] ->
#ifdef MUTANT_D16
             v = NW - 1;
             do :: !(cq[v] && wj[v] == wj[w]) -> v-- :: else -> break od;
#else
             v = w;
#endif
             if
             :: (done & (1 << wj[v])) && cur[v] -> cres[w] = 1
             :: else -> cres[w] = (st[wj[w]] == CANCELLED -> 2 : 3)
             fi
          :: else
          fi;
          w++
       :: else -> break
       od;
       w = 0;
       do :: w < NW -> cq[w] = false; w++ :: else -> break od;
       w = 0; v = 0; done = 0
     }
  od
}

/* The reaper: reap-expired and end-expired-cancels, one bounded batch (of 1) per statement, SKIP LOCKED. */
#define EXPIRED(j) (st[j] == RUNNING && hasl[j] && exl[j] == 0 && !LOCKED(j))
#define CANCEL_EXPIRED(j) (st[j] == CANCELLED && hasl[j] && exl[j] == 0 && !LOCKED(j))
active proctype Reaper() {
  byte j;
end:
  do
  /* reap-expired: expired leases go back to scheduled (backoff), or dead when out of attempts */
  :: atomic {
       ANYJ(EXPIRED) -> PICKJ(EXPIRED, j);
       if
       :: att[j] >= MA -> set_status(j, DEAD, BY_ENGINE)
       :: else -> set_status(j, SCHEDULED, BY_ENGINE);
          if :: avail[j] = 0 :: avail[j] = 1 fi    /* jittered backoff, may be 0 */
       fi;
       clear_lease(j);
       audit(j, (st[j] == DEAD -> K_DEAD : K_LEASE_EXPIRED), RUNNING, st[j]);
       settle_attempts(j);
       j = 0
     }
#ifndef MUTANT_NO_END_EXPIRED_CANCELS
  /* end-expired-cancels: a cancelled attempt whose lease ran out lets go of its key */
  :: atomic {
       ANYJ(CANCEL_EXPIRED) -> PICKJ(CANCEL_EXPIRED, j);
       clear_lease(j); release_key(j); promote_key_heads();
       j = 0
     }
#endif
  od
}

/* The scheduler: promote-scheduled, one bounded batch (of 1) per statement. */
#define DUE(j) (st[j] == SCHEDULED && avail[j] == 0)
active proctype Scheduler() {
  byte j;
end:
  do
  /* promote-scheduled: due scheduled jobs become pending */
  :: atomic { ANYJ(DUE) -> PICKJ(DUE, j); set_status(j, PENDING, BY_ENGINE); j = 0 }
  od
}

/* The KeyHandoffs pass: hand-off-keys applies the deferred releases once the key's row is free. */
active proctype KeyHandoffs() {
end:
  do
  /* hand-off-keys: the handed-off releases, applied once the key's row is free */
  :: atomic { handoff > 0 && !kheld -> kcount = kcount - handoff; handoff = 0; promote_key_heads() }
  od
}

#if NKEYED >= 2
#define PRODUCER
/* A producer enqueues job 1 of the key in a transaction that holds the key's row until it commits. */
active proctype Producer() {
  bool waits;
  /* enqueue: ON CONFLICT locks the key's row; the job waits unless the key had no unfinished job */
  atomic { started && !kheld -> kheld = true; waits = (kcount > 0); kcount++; uncommitted = true }
  /* COMMIT (enqueue): the job becomes visible, the key's row is free */
  atomic { st[1] = PENDING; kw[1] = waits; kheld = false; uncommitted = false; produced = true; waits = false }
}
#endif

/* The operator: cancel, replay, discard (cancel of a dead job), delete; one pause and resume. */
#define CANCELLABLE(j) ((st[j] == SCHEDULED || st[j] == PENDING || st[j] == RUNNING) && !LOCKED(j))
#define IS_DEAD(j) (st[j] == DEAD)
active proctype Operator() {
  byte j, ops = OPS;
  bool paused_once;
end:
  do
  /* cancel: waits for the row lock; a running job keeps its lease and its key until its attempt is over (D9) */
  :: atomic {
       ops > 0 && ANYJ(CANCELLABLE) -> PICKJ(CANCELLABLE, j); ops--;
       from_ = st[j];
       set_status(j, CANCELLED, BY_ENGINE); settle_attempts(j);
       kw[j] = false;
       if
       :: from_ == RUNNING ->
          cexl[j] = exl[j];
#ifdef MUTANT_D9
          clear_lease(j); release_key(j)
#endif
       :: else -> clear_lease(j); release_key(j)
       fi;
       promote_key_heads();
       audit(j, K_CANCELLED, from_, CANCELLED);
       from_ = 0; j = 0
     }
  /* replay: dead -> pending, same id, a fresh attempt budget; the next claim makes a new token */
  :: atomic {
       ops > 0 && ANYJ(IS_DEAD) -> PICKJ(IS_DEAD, j); ops--;
       set_status(j, PENDING, BY_REPLAY); att[j] = 0;
       audit(j, K_REPLAYED, DEAD, PENDING);
       j = 0
     }
  /* discard: cancel with allowed status dead; the key is let go */
  :: atomic {
       ops > 0 && ANYJ(IS_DEAD) -> PICKJ(IS_DEAD, j); ops--;
       set_status(j, CANCELLED, BY_DISCARD); kw[j] = false;
       release_key(j); promote_key_heads();
       audit(j, K_DISCARDED, DEAD, CANCELLED);
       j = 0
     }
  /* delete-job: discard({ delete: true }) of a dead job */
  :: atomic {
       ops > 0 && ANYJ(IS_DEAD) -> PICKJ(IS_DEAD, j); ops--;
       release_key(j); st[j] = ABSENT; deleted[j] = true; att[j] = 0; kw[j] = false;
       promote_key_heads();
       j = 0
     }
#ifndef NOPAUSE
  /* pause: set-queue-paused */
  :: atomic { !paused && !paused_once -> paused = true; paused_once = true }
  /* resume: set-queue-paused */
  :: atomic { paused -> paused = false }
#endif
  /* the operator is done */
  :: !paused -> break
  od
}

/* Invariants of every state: one state per job, a lease on every running job, one runner per key, the key's count. */
#define JOB_OK(j) (st[j] <= CANCELLED && (st[j] != ABSENT || deleted[j] || (j == 1 && !produced && NKEYED >= 2)) \
                   && (st[j] != RUNNING || (hasl[j] && exl[j] <= dl[j])))
active proctype Invariants() {
end:
  /* invariant: checked in every state */
  atomic { started && !(ALLJ(JOB_OK) && !TWO_RUN && kcount == UNFINISHED + handoff + uncommitted) -> assert(false) }
}

init {
  /* job 0: the key's head, pending; job 1: the key's next job, enqueued by the Producer;
     job 2: no key, delayed (scheduled, due after a tick) */
  atomic {
    st[0] = PENDING; kcount = (NKEYED > 0 -> 1 : 0);
#if NJ > 1
    st[1] = (NKEYED >= 2 -> ABSENT : PENDING);
#endif
#if NJ > 2
    st[2] = SCHEDULED; avail[2] = 1;
#endif
#if NJ > 3
    st[3] = PENDING;
#endif
    run Worker(0); run Worker(1);
#if NW > 2
    run Worker(2);
#endif
    started = true
  }
}

#ifdef LIVENESS
/* Every job ends (terminal, or deleted) or waits behind its key's dead head: eventually, and for good. */
#define DONE(j) (TERMINAL(st[j]) || deleted[j] || (KEYED(j) && kw[j] && DEAD_HEAD))
ltl live { <> [] ALLJ(DONE) }
#endif
