/*
 * quorumlock.pml -- Promela model of the quorumlock (Redlock) protocol.
 *
 * One file, configured with -D macros. tests/model/check.sh runs every
 * configuration; tests/model/README.md explains them and maps each part of
 * the model to the code.
 *
 *   world        N (nodes: 3 or 5), C (clients: 2 or 3)
 *   time         TTL, DRIFT (in ticks); NOCLOCK: time never passes
 *   budgets      MAXATT  acquire attempts, all clients together (<= 31)
 *                MAXEXT  extensions, all clients together
 *                MAXF    node crashes (at most 2: node 0, then node 1)
 *                MAXLOSS requests + replies lost with LOSSY (unset: no bound)
 *   protocol     FENCED  fenced two-phase acquire instead of SET NX PX
 *                WB_ALL  fenced write-back sent to every node, granted on
 *                        any Q acknowledgements (src/redlock.rs before the
 *                        fix: fences could repeat);
 *                        default: sent to the Q nodes that granted phase 1,
 *                        every one of them must acknowledge (DESIGN.md)
 *   native       NATIVE  plain locks release and extend with the server's own
 *                        commands (src/node/native.rs): the release is
 *                        DELIFEQ (the same atomic step as release.lua),
 *                        the extension two requests pipelined on the
 *                        link, SET NX PX (restore) then SET IFEQ PX
 *                        (extend), each atomic on its own, anything
 *                        between them; the acquire is SET NX PX GET
 *                NATIVE_MIXED (with NATIVE) each extension request to
 *                        each node takes either path (scripted EXT or
 *                        the native pair): nodes and clients on different
 *                        paths at once, on the same keys
 *   release      EARLY_REL  a release returns once Q nodes confirmed the
 *                        token-checked delete (or Q confirmations became
 *                        impossible); its requests to the other nodes stay
 *                        in flight on their links and are followed in the
 *                        background (default: the release waits for every
 *                        answer or the timeout, as src/round.rs does now)
 *   network      LOSSY   a request may be lost before it runs, and a reply
 *                        may be lost after it ran (the node stays up)
 *   crash modes  CRASH_DELAYED    loses key+counter, back after TTL+1 ticks
 *                CRASH_PERSIST    keeps key+counter, back at any time
 *                CRASH_IMMEDIATE  loses key+counter, back at once
 *   properties   PROP_MUTEX (P1, CHECK_MUTEX)  PROP_FENCE (P2, in grant)
 *                PROP_CLEANUP (P3, in finish_release, and with EARLY_REL
 *                  in follow_done for a release)  PROP_TOKEN (P4, in apply)
 *                PROP_FOLLOWUP (EARLY_REL: P3 for releases only, in
 *                  follow_done; cleanups are not waited for)
 *   negative controls (spin must find a counterexample with each):
 *                NO_ELAPSED            validity ignores the elapsed time
 *                NO_WRITEBACK          fenced acquire without phase 2
 *                NO_RECHECK            no validity check after the write-back
 *                WB_ONE_ACK            write-back needs one ack, not a quorum
 *                PLAIN_DEL             release is a plain DEL
 *                CLEANUP_GRANTED_ONLY  cleanup only on the nodes that said yes
 *                REORDER               a later request to a node may overtake
 *                                      an earlier one (different connections)
 *                EXT_FOREIGN           an extension counts a node that holds
 *                                      another token as a yes
 *                LATE_PLAIN_DEL        (EARLY_REL) a release's delete that
 *                                      lands after the release returned is
 *                                      a plain DEL (no token check)
 *                NATIVE_PLAIN_SET      (NATIVE) the restore is a plain
 *                                      SET key token PX ttl (no NX): it
 *                                      overwrites another holder's key
 *                WB_KEEPS_MARK         (FENCED) the write-back leaves the
 *                                      counter's mark: a retry reuses a
 *                                      value a later grant's fence equals
 *                EXT_NO_RESTORE        (not a control: the extension before
 *                                      issue 12, PEXPIRE only, no restore)
 *
 * TIME. One discrete clock; a TICK step is one tick, and it is also the
 * clients' monotonic clock. The state keeps relative timers (remaining key
 * life, elapsed time of an operation, remaining believed-held window), not
 * absolute times, so the clock never has to stop: runs of any length are
 * covered, and states that differ only in "what time is it" are one state.
 *
 * DRIFT. A node's clock may run up to DRIFT ticks fast relative to the
 * client's: a key may vanish up to DRIFT ticks before its TTL is over.
 *
 * STRUCTURE. The whole world is one process whose loop offers every possible
 * next step (a tick, a client starting an operation, a node running a
 * request, a request lost, a client's timeout, a crash, a restart); each
 * step is atomic, and spin explores every order of them.
 */

#ifndef N
#define N 3
#endif
#define Q (N/2 + 1)               /* quorum: src/quorum.rs quorum()          */
#ifndef C
#define C 2
#endif
#define L (C*N)                   /* one link (connection) per client x node */
#ifndef TTL
#define TTL 3
#endif
#ifndef DRIFT
#define DRIFT 1
#endif
#define VWIN (TTL - DRIFT)        /* validity of a grant taken at once, ticks */
#ifndef MAXATT
#define MAXATT 3
#endif
#if MAXATT > 31
#error "MAXATT > 31: tokens and fences must fit in 5 bits (see MSG)"
#endif
#ifndef MAXEXT
#define MAXEXT 1
#endif
#ifndef MAXF
#define MAXF 1
#endif
/* MAXLOSS (LOSSY only): at most this many requests and replies lost in a
   run; unbounded when not defined. */
/* Requests in flight per link: enough that a client never has to wait for
   old requests before starting a new operation (a multiplexed connection
   does not wait either): per attempt an acquire, a write-back and a
   release, plus the extensions. send() asserts it is never exceeded. */
#ifdef NATIVE
#define LINKCAP (3*MAXATT + 2*MAXEXT)   /* a native extension is 2 requests */
#else
#define LINKCAP (3*MAXATT + MAXEXT)
#endif

/* Request kinds, each one Redis command or script that a node runs
   atomically. */
#define SET  1   /* SET key token NX PX ttl                 src/lock/node.rs acquire      */
#define FSET 2   /* SET NX PX; if set, INCR counter, return src/lock/acquire_fenced.lua */
#define WB   3   /* counter = max(counter, t)               src/lock/fence_writeback.lua */
#define EXT  4   /* if GET key == token then PEXPIRE; if no key then SET
                    key token PX ttl (restore; fenced: counter raised to the
                    lock's fence); else no          src/lock/extend.lua         */
#define REL  5   /* if GET key == token then DEL            src/lock/release.lua        */
                 /* (NATIVE: DELIFEQ key token, the same atomic step  src/node/native.rs) */
#define XNX  6   /* NATIVE extension, 1st: SET key token NX PX ttl   src/node/native.rs */
#define XEQ  7   /* NATIVE extension, 2nd: SET key token IFEQ token PX ttl;
                    the pair's answer: yes if either set the key        */

/* A request on a link is one byte: the kind, and its argument (the token;
   for WB the fence t, since the write-back is not token-checked). */
#define MSG(op, v) ((op) * 32 + (v))
#define OPOF(m)    ((m) / 32)
#define ARGOF(m)   ((m) % 32)

#ifdef NATIVE
#if defined(FENCED)
#error "NATIVE: plain locks only (a fenced lock keeps its scripts)"
#endif
#if defined(REORDER)
#error "NATIVE: the two requests of an extension are pipelined on one connection; REORDER would split them"
#endif
#if L > 8
#error "NATIVE: nxm has one bit per link (C*N <= 8)"
#endif
#endif
#ifdef FENCED
#define ACQ FSET
#else
#define ACQ SET
#endif

/* per-link status of the current operation, as the client's tally sees it */
#define IDLE 0   /* no request of the current operation on this link      */
#define WAIT 1   /* request sent, no answer yet                           */
#define YES  2   /* answered yes (granted / extended / done)              */
#define NO   3   /* answered no                                           */
#define TOUT 4   /* timed out: a failed vote; the request may still be in
                    flight and land later                                 */

/* client phases */
#define P_IDLE 0   /* nothing in progress (holding the lock or not)        */
#define P_ACQ  1   /* acquire fanned out (SET NX PX or the fenced script)  */
#define P_WB   2   /* fenced acquire, phase 2: write-back fanned out       */
#define P_EXT  3   /* extension fanned out (still holding)                */
#define P_REL  4   /* release or failure cleanup fanned out               */
#define P_RELQ 5   /* EARLY_REL: release fanned out, returns at a quorum  */

/* ------------------------------------------------------------------ state */

/* nodes */
byte key[N];        /* token of the lock key, 0 = no key                   */
byte life[N];       /* ticks until the key expires (the node may drop it
                       up to DRIFT ticks earlier, see apply)               */
byte cnt[N];        /* fence counter: never expires                        */
byte markc[N];      /* the counter's mark (src/lock/acquire_fenced.lua):
                       client + 1 whose acquire last raised it, 0 none.
                       The code's mark holds the value it raised it to,
                       and counts only while the counter still has it;
                       counters only grow, so here the mark goes whenever
                       the counter changes otherwise (the same states,
                       fewer of them). Never expires here (the code's
                       may: then it INCRs, which the model may do too). */
bool down[N];       /* crashed, not yet restarted                          */
byte downfor[N];    /* ticks before it may restart (CRASH_DELAYED)         */
byte faults;        /* crashes so far                                      */
#if defined(LOSSY) && defined(MAXLOSS)
byte losses;        /* requests and replies lost so far                    */
#define CAN_LOSE   (losses < MAXLOSS)
#define COUNT_LOSS losses++
#else
#define CAN_LOSE   true
#define COUNT_LOSS skip
#endif

/* client -> node links; link i joins client i / N to node i % N.
   FIFO, like one connection. */
chan q[L] = [LINKCAP] of { byte };

/* the tally of each client's current operation (src/quorum.rs Tally) */
byte st[L];         /* status per link, IDLE .. TOUT                       */
byte nyes[C];       /* YES answers                                         */
byte nno[C];        /* NO answers + timeouts                               */
byte nwait[C];      /* still waiting                                       */
byte tmax[C];       /* max counter value among YES answers (fenced)        */
byte refm[C];       /* bit k: node k answered "no" to this attempt's SET NX
                       (phase 1), so a failure cleanup skips it. Nonzero
                       only while a fenced attempt is in phase 2.          */

/* clients */
byte ph[C];         /* phase, P_IDLE .. P_REL                              */
byte tok[C];        /* token of the current attempt / the held lock        */
byte fence[C];      /* t = max(values) of the current fenced attempt       */
byte el[C];         /* ticks since the acquire/extend started (saturates)  */
bool held[C];       /* believes it holds the lock ...                      */
byte win[C];        /* ... for this many more ticks: deadline - now        */
byte attempts;      /* acquire attempts so far, also the token generator   */
byte exts;          /* extensions so far                                   */
byte last_fence;    /* fence of the latest grant (property 2)              */
#ifdef PROP_TOKEN
byte tokc[MAXATT + 1];  /* ghost: the client that generated each token     */
#endif
#if defined(FENCED) && MAXEXT > 0
byte tokf[MAXATT + 1];  /* the fence granted with each token: what an
                           extension of that lock sends along (the lease's
                           fence), a function of the token                 */
#define SETTOKF(c) tokf[tok[c]] = fence[c]
#else
#define SETTOKF(c) skip
#endif
#ifdef EARLY_REL
#if MAXATT > 7
#error "EARLY_REL: MAXATT > 7 (token bit masks are bytes)"
#endif
#if defined(PROP_CLEANUP) || defined(PROP_FOLLOWUP)
#define FOLLOW              /* the follow-ups are tracked                  */
#endif
#ifdef FOLLOW
/* The background follow-up of each released token (EARLY_REL, property 3):
   bit k of fpend[t]: the delete of token t to node k was still unanswered
   when the release returned, and is followed; bit k of fto[t]: that node
   timed out (before or after the return). Indexed by token, not client: a
   token is released at most once, and a client may take and release a new
   lock while the follow-up of its old one still runs. */
byte fpend[MAXATT + 1];
byte fto[MAXATT + 1];
#endif
#ifdef LATE_PLAIN_DEL
byte retm;          /* ghost: bit t set once the release of token t returned */
#endif
#endif

#ifdef NATIVE
/* bit i: on link i, the first request of a native extension (SET NX)
   has run and set the key; its second (SET IFEQ), next on the link, has
   not run yet. The pair's answer reaches the client with the second. */
byte nxm;
/* requests on link i were lost (DROP, CRASH): a pair half run is over */
#define NXCLEAR(i) ; nxm = nxm & ~(1 << (i))
#else
#define NXCLEAR(i)
#endif

/* scratch, only used inside one atomic step: kept out of the state vector */
hidden byte h_dec, h_c, h_n, h_i, h_k, h_m, h_m2, h_m3, h_r, h_v, h_j;
hidden byte h_cur;
hidden byte now_h;  /* tick counter, only for printing trails               */

#define SCRUB h_dec = 0; h_c = 0; h_n = 0; h_i = 0; h_k = 0; h_m = 0; \
	h_m2 = 0; h_m3 = 0; h_r = 0; h_v = 0; h_j = 0; h_cur = 0

#define TIMING(c)   (ph[c] == P_ACQ || ph[c] == P_WB || ph[c] == P_EXT)

/* for trails only */
inline say_op(op)
{
	if
	:: op == SET  -> printf("SET")
	:: op == FSET -> printf("FSET")
	:: op == WB   -> printf("WB")
	:: op == EXT  -> printf("EXT")
#ifdef NATIVE
	:: op == REL  -> printf("DELIFEQ")
	:: op == XNX  -> printf("SETNX")
	:: op == XEQ  -> printf("SETIFEQ")
#else
	:: op == REL  -> printf("REL")
#endif
	:: else -> printf("?")
	fi
}

/* ---------------------------------------------- validity (src/quorum.rs) */

/* validity = ttl - elapsed - drift > 0, elapsed counted from the start of
   the acquire (or of the extension): Window::validity_at; the deadline
   start + ttl - drift (Window::deadline) is VWIN - elapsed ticks from now */
#ifdef NO_ELAPSED
/* negative control (c): the elapsed time is not subtracted */
#define VALID(c)    (VWIN > 0)
#define WINDOW(c)   (VWIN)
#else
#define VALID(c)    (el[c] < VWIN)
#define WINDOW(c)   (VWIN - el[c])
#endif

/* The window is only observed by property 1 and by the "extend only while
   the lock is trusted" rule; elsewhere it is not tracked, so that states
   differing only in its value are one state. */
#if defined(PROP_MUTEX) || MAXEXT > 0
#define SETWIN(c, w) win[c] = (w)
#else
#define SETWIN(c, w) skip
#endif

/* ------------------------------------------------------ the client's side */

inline clear_tally(c)
{
	nyes[c] = 0; nno[c] = 0; nwait[c] = 0; tmax[c] = 0
}

/* the operation is decided: forget it (late answers will be dropped) */
inline close_op(c, k)
{
	clear_tally(c);
	for (k : 0 .. N-1) { st[c*N + k] = IDLE };
	k = 0
}

/* a request of client c to node k (one multiplexed connection per node) */
inline send(c, k, op, v)
{
	if
	:: down[k] -> skip             /* node down: nothing lands, the client
	                                  will see a timeout */
	:: else ->
		assert(len(q[c*N + k]) < LINKCAP);   /* never blocks */
		q[c*N + k]!MSG(op, v)
	fi;
	st[c*N + k] = WAIT; nwait[c]++
}

#ifdef NATIVE
/* a native extension of client c to node k: SET NX then SET IFEQ,
   pipelined on the one connection, so adjacent on the FIFO link, but two
   requests the node runs one at a time (src/node/native.rs push_extend) */
inline send_ext(c, k, v)
{
	if
	:: down[k] -> skip
	:: else ->
		assert(len(q[c*N + k]) + 2 <= LINKCAP);   /* never blocks */
		q[c*N + k]!MSG(XNX, v); q[c*N + k]!MSG(XEQ, v)
	fi;
	st[c*N + k] = WAIT; nwait[c]++
}

/* the extension to every node, on the native path (NATIVE_MIXED: on
   either path, chosen per node and per extension) */
inline fanout_ext(c, k, v)
{
	clear_tally(c);
	for (k : 0 .. N-1) {
#ifdef NATIVE_MIXED
		if
		:: true -> send(c, k, EXT, v)        /* scripted: extend.lua */
		:: true -> send_ext(c, k, v)         /* native pair */
		fi
#else
		send_ext(c, k, v)
#endif
	};
	k = 0
}
#define FANOUT_EXT(c, k, v) fanout_ext(c, k, v)
#else
#define FANOUT_EXT(c, k, v) fanout(c, k, EXT, v)
#endif

/* one request to every node in parallel (src/redlock.rs fan_out) */
inline fanout(c, k, op, v)
{
	clear_tally(c);
	for (k : 0 .. N-1) { send(c, k, op, v) };
	k = 0
}

/* one request to the nodes that answered YES in the tally */
inline fanout_granted(c, k, op, v)
{
	clear_tally(c);
	for (k : 0 .. N-1) {
		if
		:: st[c*N + k] == YES -> send(c, k, op, v)
		:: else -> st[c*N + k] = IDLE
		fi
	};
	k = 0
}

/* When is a release (or cleanup) over? Only property 3 looks at how it
   ended: there the client waits until every node answered or timed out
   (src/redlock.rs release_everywhere waits for every answer or the node
   timeout). In the other runs the client does not wait (it could start its
   next attempt at any later moment anyway), so release answers are not
   tracked: fewer states, and no behaviour lost. */
#ifdef PROP_CLEANUP
#define REL_DONE(c) (nwait[c] == 0)
#else
#define REL_DONE(c) true
#endif

inline finish_release(c, k)
{
#ifdef PROP_CLEANUP
	/* property 3: no node holds our token any more, except a node that was
	   sent the release and never answered (unreachable, crashed, or the
	   request or its reply lost: its key expires within TTL ticks) */
	for (k : 0 .. N-1) {
		assert(key[k] != tok[c] || st[c*N + k] == TOUT)
	};
	k = 0;
#endif
	printf("MSC: t=%d client %d release/cleanup of token %d done\n", now_h, c, tok[c]);
	close_op(c, k); ph[c] = P_IDLE; tok[c] = 0
}

#ifdef EARLY_REL
/* The follow-up of the release of token t is over (every delete that was
   still in flight when the release returned has answered, or timed out).
   Property 3 for the release, checked now rather than when the release
   returned: no node holds t, except a node that never answered. */
inline follow_done(t, k)
{
#ifdef FOLLOW
	for (k : 0 .. N-1) {
		assert(key[k] != t || ((fto[t] >> k) & 1))
	};
	k = 0; fto[t] = 0;
#endif
	printf("MSC: t=%d follow-up of the release of token %d done\n", now_h, t)
}

/* The release of client c has its outcome: a quorum deleted the token, or
   a quorum can no longer do so (answers "not ours", timeouts). The client
   is done and may start a new attempt at once; the deletes still in flight
   stay on their links, in order behind whatever was sent before them, and
   are followed in the background (src/round.rs follow). */
inline release_returns(c, k)
{
	printf("MSC: t=%d client %d release of token %d RETURNS (deleted=%d, not/failed=%d, in flight=%d)\n",
	       now_h, c, tok[c], nyes[c], nno[c], nwait[c]);
#ifdef FOLLOW
	fpend[tok[c]] = 0; fto[tok[c]] = 0;
	for (k : 0 .. N-1) {
		if
		:: st[c*N + k] == WAIT -> fpend[tok[c]] = fpend[tok[c]] | (1 << k)
		:: st[c*N + k] == TOUT -> fto[tok[c]] = fto[tok[c]] | (1 << k)
		:: else
		fi
	};
	k = 0;
	if
	:: fpend[tok[c]] == 0 -> follow_done(tok[c], k)
	:: else
	fi;
#endif
#ifdef LATE_PLAIN_DEL
	retm = retm | (1 << tok[c]);
#endif
	close_op(c, k); ph[c] = P_IDLE; tok[c] = 0
}
#endif

/* refm[c] = the nodes a failure cleanup skips: those that answered "no" to
   SET NX in the acquire tally (src/redlock.rs attempt: `round.refused()`;
   a node that refused did not store the token). Every other node --
   granted, timed out, reply lost, never heard from -- may hold it. */
inline refusals(c, k)
{
	refm[c] = 0;
	for (k : 0 .. N-1) {
		if
#ifdef CLEANUP_GRANTED_ONLY
		:: st[c*N + k] != YES ->         /* negative control (e) */
#else
		:: st[c*N + k] == NO ->
#endif
			refm[c] = refm[c] | (1 << k)
		:: else
		fi
	};
	k = 0
}

/* failed acquisition (src/redlock.rs Cleanup::run): token-checked release
   on every node except those in refm[c]; if every node refused, nothing is
   sent. */
inline start_cleanup(c, k)
{
	printf("MSC: t=%d client %d attempt failed (yes=%d, elapsed=%d): cleanup, skipping node mask %d\n",
	       now_h, c, nyes[c], el[c], refm[c]);
	el[c] = 0; fence[c] = 0; ph[c] = P_REL;
	clear_tally(c);
	for (k : 0 .. N-1) {
		if
		:: refm[c] & (1 << k) -> st[c*N + k] = IDLE
		:: else -> send(c, k, REL, tok[c])
		fi
	};
	k = 0; refm[c] = 0
}

inline grant(c, k)
{
	printf("MSC: t=%d client %d GRANTED token %d fence %d window %d ticks\n",
	       now_h, c, tok[c], fence[c], WINDOW(c));
#if defined(PROP_FENCE) && defined(FENCED)
	/* property 2: grants, in time order, carry strictly increasing fences */
	assert(fence[c] > last_fence);
#endif
	last_fence = fence[c];
	SETTOKF(c);
	held[c] = 1; SETWIN(c, WINDOW(c));       /* window [now, start+ttl-drift) */
	el[c] = 0; fence[c] = 0; refm[c] = 0;
	close_op(c, k); ph[c] = P_IDLE
}

/* Write-back acknowledgements needed: Q. By default the write-back goes
   to the Q nodes that granted phase 1, so every one of them must ack; with
   WB_ALL it goes to all N nodes, and any Q acks suffice. */
#ifdef WB_ONE_ACK
#define WBQ 1                                /* negative control (i) */
#else
#define WBQ Q
#endif

/* The quorum decision (src/quorum.rs Tally::decision), taken as soon as the
   outcome is known: success at Q yes votes, failure once Q yes votes have
   become impossible. It runs inside the step that delivered the deciding
   answer or timeout: deciding later would only shorten the window, never
   lengthen it. */
inline decide(c, k)
{
	do
	:: ph[c] == P_ACQ && (nyes[c] >= Q || nno[c] > N - Q) ->
		/* src/redlock.rs attempt + granted(): quorum AND validity left */
		if
		:: nyes[c] >= Q && VALID(c) ->
			fence[c] = tmax[c];
#if defined(FENCED) && !defined(NO_WRITEBACK)
			/* phase 2: counter = max(counter, t) */
			refusals(c, k);                  /* kept for a cleanup */
#ifdef WB_ALL
			fanout(c, k, WB, fence[c]);          /* every node */
#else
			fanout_granted(c, k, WB, fence[c]);  /* the granting nodes */
#endif
			ph[c] = P_WB
#else
			grant(c, k)
#endif
		:: else -> refusals(c, k); start_cleanup(c, k)
		fi
	:: ph[c] == P_WB && (nyes[c] >= WBQ || nyes[c] + nwait[c] < WBQ) ->
		/* counts only once a quorum acknowledged the write-back AND the
		   validity, recomputed now from the attempt's start, is still
		   positive */
		if
#ifdef NO_RECHECK
		:: nyes[c] >= WBQ -> grant(c, k)     /* negative control (g) */
#else
		:: nyes[c] >= WBQ && VALID(c) -> grant(c, k)
#endif
		:: else -> start_cleanup(c, k)       /* refm: phase-1 refusals */
		fi
	:: ph[c] == P_EXT && (nyes[c] >= Q || nno[c] > N - Q) ->
		if
		:: nyes[c] >= Q && VALID(c) && win[c] > 0 ->
			/* src/guard.rs extend: validity left for the new window AND
			   the lock still trusted now (Held::extend_to); the new
			   deadline counts from the start of the extension */
			SETWIN(c, WINDOW(c));
			printf("MSC: t=%d client %d extended: window %d ticks\n", now_h, c, WINDOW(c))
		:: else ->
			/* the code keeps the old deadline when too few nodes answered
			   and marks the lock lost otherwise; the model always keeps
			   the old deadline: more permissive, never less */
			printf("MSC: t=%d client %d extension failed\n", now_h, c)
		fi;
		el[c] = 0; close_op(c, k); ph[c] = P_IDLE
	:: ph[c] == P_REL && REL_DONE(c) ->
		finish_release(c, k)
#ifdef EARLY_REL
	:: ph[c] == P_RELQ && (nyes[c] >= Q || nno[c] > N - Q) ->
		release_returns(c, k)
#endif
	:: else -> break
	od
}

/* --------------------------------------------------------------- the node */

/* Node n runs request m of client c (link i) atomically, as Redis runs a
   command or a script. cur: the request belongs to the client's current
   operation (it is the newest one on its link). */
inline apply(i, c, n, m, cur)
{
	assert(!down[n]);   /* nothing is in flight to a node that is down */
	printf("MSC: t=%d node %d runs ", now_h, n); say_op(OPOF(m));
	printf(" %d from client %d", ARGOF(m), c);
	/* bounded drift: the node's clock may be ahead by up to DRIFT ticks,
	   so it may already consider the key expired */
	if
	:: key[n] != 0 && life[n] <= DRIFT -> key[n] = 0; life[n] = 0
	:: true
	fi;
	h_r = NO; h_v = 0;
	if
	:: OPOF(m) == SET ->
		if
		:: key[n] == 0 -> key[n] = ARGOF(m); life[n] = TTL; h_r = YES
#ifdef NATIVE
		/* SET NX PX GET (batch acquire): the key already holds our token,
		   a resend of our own, granted (no write). Unreachable here: the
		   model sends each token's SET once per node, and nothing else
		   sets the token on a node before its SET ran (FIFO links). */
		:: key[n] == ARGOF(m) -> h_r = YES
#endif
		:: else
		fi
	:: OPOF(m) == FSET ->
		/* INCR only when the SET NX succeeded; not even then when this
		   client's own acquire was the last to raise the counter and
		   nothing wrote it since (the mark): a retry reuses the value its
		   failed attempt took. A client's attempts here stand for one
		   call's (the code's mark is per call): the model reuses across
		   any two of them. With MARK_EXPIRES it may also INCR instead
		   (the code's mark may have expired, or be another call's). */
		if
		:: key[n] == 0 -> key[n] = ARGOF(m); life[n] = TTL; h_r = YES;
			if
			:: markc[n] == c + 1 -> skip
#ifdef MARK_EXPIRES
			:: markc[n] == c + 1 -> cnt[n]++
#endif
			:: else -> cnt[n]++; markc[n] = c + 1
			fi;
			h_v = cnt[n]
		:: else
		fi
	:: OPOF(m) == WB ->
		/* no token check; counters only grow; the mark goes */
		if
		:: cnt[n] < ARGOF(m) -> cnt[n] = ARGOF(m)
		:: else
		fi;
#ifndef WB_KEEPS_MARK
		markc[n] = 0;
#endif
		h_r = YES
	:: OPOF(m) == EXT ->
		/* an extension is a Redlock round with the holder's own token:
		   where the key holds it, a new ttl; where there is no key (it
		   expired early, the node restarted empty), the key is set again,
		   as the acquire would set it; where another token is, no, and
		   that key is not touched */
		if
		:: key[n] == ARGOF(m) ->
#ifdef PROP_TOKEN
			assert(tokc[key[n]] == c);   /* property 4 */
#endif
			life[n] = TTL; h_r = YES
#ifndef EXT_NO_RESTORE
		:: key[n] == 0 ->
#ifdef PROP_TOKEN
			assert(tokc[ARGOF(m)] == c); /* property 4 */
#endif
			key[n] = ARGOF(m); life[n] = TTL; h_r = YES;
#if defined(FENCED) && MAXEXT > 0
			/* the counter is raised to at least the lock's fence, as the
			   acquire's write-back did */
			if
			:: cnt[n] < tokf[ARGOF(m)] -> cnt[n] = tokf[ARGOF(m)]; markc[n] = 0
			:: else
			fi;
#endif
			printf(" (restored)")
#endif
#ifdef EXT_FOREIGN
		:: key[n] != 0 && key[n] != ARGOF(m) ->
			h_r = YES                    /* negative control (k) */
#endif
		:: else
		fi
#ifdef NATIVE
	:: OPOF(m) == XNX ->
		/* SET key token NX PX ttl: sets (restores) only where there is no
		   key; the answer travels with the SET IFEQ behind it */
		if
#ifdef NATIVE_PLAIN_SET
		:: true ->                       /* negative controls (n, o): a
		                                    plain SET, over any key */
			if
			:: key[n] != 0 && key[n] != ARGOF(m) ->
				printf(" (overwrites %d)", key[n]);
#ifdef PROP_TOKEN
				assert(tokc[key[n]] == c)    /* property 4 */
#else
				skip
#endif
			:: else
			fi;
#else
		:: key[n] == 0 ->
#ifdef PROP_TOKEN
			assert(tokc[ARGOF(m)] == c); /* property 4 */
#endif
			printf(" (restored)");
#endif
			key[n] = ARGOF(m); life[n] = TTL; nxm = nxm | (1 << i);
			h_r = YES                    /* set: travels with the 2nd */
		:: else
		fi
	:: OPOF(m) == XEQ ->
		/* SET key token IFEQ token PX ttl: a new ttl only where the key
		   holds our token; the pair says yes if either set the key */
		if
		:: key[n] == ARGOF(m) ->
#ifdef PROP_TOKEN
			assert(tokc[key[n]] == c);   /* property 4 */
#endif
			life[n] = TTL; h_r = YES
		:: else
		fi;
		if
		:: (nxm >> i) & 1 -> h_r = YES; nxm = nxm ^ (1 << i)
		:: else
		fi
#endif
	:: OPOF(m) == REL ->
		if
#ifdef PLAIN_DEL
		:: key[n] != 0 ->              /* negative control (d): no check */
#elif defined(LATE_PLAIN_DEL)
		/* negative control (l): a delete that lands after its release
		   returned deletes whatever key is there */
		:: key[n] != 0 && (key[n] == ARGOF(m) || ((retm >> ARGOF(m)) & 1)) ->
#else
		:: key[n] == ARGOF(m) ->
#endif
#ifdef PROP_TOKEN
			assert(tokc[key[n]] == c);   /* property 4 */
#endif
			key[n] = 0; life[n] = 0;
#ifdef EARLY_REL
			h_r = YES                    /* deleted: a confirmation */
#else
			skip
#endif
		:: else                          /* not ours: nothing deleted */
		fi;
#ifndef EARLY_REL
		h_r = YES                      /* done (deleted 1 or 0) */
#endif
	fi;
	printf(" -> %d (key=%d life=%d cnt=%d)\n", h_r, key[n], life[n], cnt[n]);
	/* the answer reaches the tally only if the client still waits for this
	   very request; a late answer to an older operation is dropped, as the
	   multiplexed connection does */
#ifdef NATIVE
	/* the first of a native pair answers with the second, which is always
	   behind it on the link (sent in one step, FIFO; a DROP takes the head,
	   a crash all): so it is never the current request */
	assert(OPOF(m) != XNX || !(cur));
#endif
	if
#ifdef LOSSY
	:: st[i] == WAIT && cur && CAN_LOSE ->
		/* the reply is lost on the way back: the client will time out on
		   this node although the request ran */
		COUNT_LOSS;
		printf("MSC: t=%d   (reply lost)\n", now_h)
#endif
	:: st[i] == WAIT && cur ->
		st[i] = h_r; nwait[c]--;
		if
		:: h_r == YES -> nyes[c]++;
			if
			:: h_v > tmax[c] -> tmax[c] = h_v
			:: else
			fi
		:: else -> nno[c]++
		fi;
		h_dec = 1                      /* the tally changed: decide */
	:: else
	fi;
#ifdef FOLLOW
	/* a delete of a returned release: its follow-up sees the answer */
	if
	:: OPOF(m) == REL && ((fpend[ARGOF(m)] >> n) & 1) ->
		fpend[ARGOF(m)] = fpend[ARGOF(m)] ^ (1 << n);
		if
		:: fpend[ARGOF(m)] == 0 -> follow_done(ARGOF(m), h_j)
		:: else
		fi
	:: else
	fi
#else
	skip
#endif
}

/* ------------------------------------------------ choosing who moves next */

/* PICKLINK(cond) / PICKCLIENT(cond): an `if` that sets h_i (a link) / h_c
   (a client) to any index for which cond holds, and blocks if there is
   none, so it can serve as the guard of a step. Written out, because a
   Promela loop cannot serve as a guard. */
#define P1(cond, var, x) :: cond(x) -> var = x
#define LINKHAS(i) (len(q[i]) > 0)
#if L == 6
#define PICKLINK(cond) if P1(cond,h_i,0) P1(cond,h_i,1) P1(cond,h_i,2) P1(cond,h_i,3) \
	P1(cond,h_i,4) P1(cond,h_i,5) fi
#elif L == 9
#define PICKLINK(cond) if P1(cond,h_i,0) P1(cond,h_i,1) P1(cond,h_i,2) P1(cond,h_i,3) \
	P1(cond,h_i,4) P1(cond,h_i,5) P1(cond,h_i,6) P1(cond,h_i,7) P1(cond,h_i,8) fi
#elif L == 10
#define PICKLINK(cond) if P1(cond,h_i,0) P1(cond,h_i,1) P1(cond,h_i,2) P1(cond,h_i,3) \
	P1(cond,h_i,4) P1(cond,h_i,5) P1(cond,h_i,6) P1(cond,h_i,7) P1(cond,h_i,8) \
	P1(cond,h_i,9) fi
#elif L == 15
#define PICKLINK(cond) if P1(cond,h_i,0) P1(cond,h_i,1) P1(cond,h_i,2) P1(cond,h_i,3) \
	P1(cond,h_i,4) P1(cond,h_i,5) P1(cond,h_i,6) P1(cond,h_i,7) P1(cond,h_i,8) \
	P1(cond,h_i,9) P1(cond,h_i,10) P1(cond,h_i,11) P1(cond,h_i,12) P1(cond,h_i,13) \
	P1(cond,h_i,14) fi
#else
#error "unsupported C*N"
#endif
#if C == 2
#define PICKCLIENT(cond) if P1(cond,h_c,0) P1(cond,h_c,1) fi
#elif C == 3
#define PICKCLIENT(cond) if P1(cond,h_c,0) P1(cond,h_c,1) P1(cond,h_c,2) fi
#else
#error "unsupported C"
#endif

/* ----------------------------------------------------------------- steps */

#ifdef PROP_TOKEN
#define OWN(c) tokc[attempts] = c
#else
#define OWN(c) skip
#endif

/* ACQUIRE (src/redlock.rs attempt): a client that holds nothing starts an
   attempt: start = now, a fresh token, the acquire request to every node.
   The first attempt is always client 0's: clients are interchangeable, so
   a run where another client starts is a renaming of one of these. */
#define CAN_ACQUIRE(c) (ph[c] == P_IDLE && !held[c] && attempts < MAXATT && \
                        (attempts > 0 || c == 0))
#define ACQUIRE \
	:: PICKCLIENT(CAN_ACQUIRE); \
		attempts++; tok[h_c] = attempts; OWN(h_c); el[h_c] = 0; ph[h_c] = P_ACQ; \
		printf("MSC: t=%d client %d ACQUIRE token %d\n", now_h, h_c, tok[h_c]); \
		fanout(h_c, h_k, ACQ, tok[h_c]); \
		h_dec = 1

/* EXTEND (src/guard.rs extend): a holder extends, while it can still trust
   the lock (after the deadline the guard reports the lock lost); validity
   counts from now. */
#define CAN_EXTEND(c) (ph[c] == P_IDLE && held[c] && win[c] > 0 && \
                       exts < MAXEXT)
#define EXTEND \
	:: PICKCLIENT(CAN_EXTEND); \
		exts++; el[h_c] = 0; ph[h_c] = P_EXT; \
		printf("MSC: t=%d client %d EXTEND token %d\n", now_h, h_c, tok[h_c]); \
		FANOUT_EXT(h_c, h_k, tok[h_c]); \
		h_dec = 1

/* RELEASE (src/guard.rs release, and the guard's Drop): a holder releases,
   at any time, even long after its deadline, when the key may already be
   someone else's. The delete to each node goes onto that node's link,
   behind whatever the client still has in flight there (a late SET, an
   extension), without waiting for it. With EARLY_REL the release returns
   at a quorum (release_returns); without it, it waits for every answer or
   the timeout in the P3 runs, and for nothing in the others. */
#define CAN_RELEASE(c) (ph[c] == P_IDLE && held[c])
#ifdef EARLY_REL
#define PH_RELEASE P_RELQ
#else
#define PH_RELEASE P_REL
#endif
#define RELEASE \
	:: PICKCLIENT(CAN_RELEASE); \
		held[h_c] = 0; win[h_c] = 0; ph[h_c] = PH_RELEASE; \
		printf("MSC: t=%d client %d RELEASE token %d\n", now_h, h_c, tok[h_c]); \
		fanout(h_c, h_k, REL, tok[h_c]); \
		h_dec = 1

/* DELIVER: the oldest request in flight on some link reaches its node.
   A request may stay in flight across any number of ticks and land long
   after the client stopped waiting for it. */
#define DELIVER \
	:: PICKLINK(LINKHAS); \
		h_c = h_i / N; h_n = h_i % N; \
		q[h_i]?h_m; \
		apply(h_i, h_c, h_n, h_m, len(q[h_i]) == 0)

/* DROP (LOSSY): the oldest request in flight on a link is lost and never
   runs (its connection broke before the node read it; the client
   reconnects, and its later requests on the link still arrive, in order).
   The client times out on it if it still waits. Without LOSSY, requests are
   lost only when their node crashes or is down when they are sent. */
#ifdef LOSSY
#define LOSABLE(i) (len(q[i]) > 0 && CAN_LOSE)
#define DROP \
	:: PICKLINK(LOSABLE); \
		COUNT_LOSS; q[h_i]?h_m NXCLEAR(h_i); \
		printf("MSC: t=%d request ", now_h); say_op(OPOF(h_m)); \
		printf(" %d from client %d to node %d LOST\n", ARGOF(h_m), h_i / N, h_i % N)
#else
#define DROP
#endif

/* OVERTAKE (REORDER only): the second request in flight on a link reaches
   the node before the first one: they went over different connections,
   e.g. the first on a connection that broke, the second after a reconnect.
   The first one stays at the head of the link. */
#define LINKHAS2(i) (len(q[i]) >= 2)
#ifdef REORDER
#define OVERTAKE \
	:: PICKLINK(LINKHAS2); \
		h_c = h_i / N; h_n = h_i % N; \
		q[h_i]?h_m; q[h_i]?h_m2; \
		h_j = len(q[h_i]); h_cur = (h_j == 0); \
		q[h_i]!h_m; \
		do \
		:: h_j > 0 -> q[h_i]?h_m3; q[h_i]!h_m3; h_j-- \
		:: else -> break \
		od; \
		apply(h_i, h_c, h_n, h_m2, h_cur)
#else
#define OVERTAKE
#endif

/* TIMEOUT: the per-node timeouts of a fan-out start together and have the
   same length (src/redlock.rs: one deadline per fan-out), so they fire
   together: every node still pending counts as a failed vote. Its request
   stays in flight and may still land later. The model lets the timeout
   fire at any moment, also later than the code's cap at the deadline. */
#define WAITING(c) (nwait[c] > 0)
#define TIMEOUT \
	:: PICKCLIENT(WAITING); \
		printf("MSC: t=%d client %d: timeout on %d node(s)\n", now_h, h_c, nwait[h_c]); \
		for (h_k : 0 .. N-1) { \
			if \
			:: st[h_c*N + h_k] == WAIT -> st[h_c*N + h_k] = TOUT \
			:: else \
			fi \
		}; \
		nno[h_c] = nno[h_c] + nwait[h_c]; nwait[h_c] = 0; \
		h_dec = 1

/* FTIMEOUT (EARLY_REL, with the follow-ups tracked): the deadline of a
   returned release passes, and every delete its follow-up still waits for
   counts as failed (one deadline per fan-out, as TIMEOUT). The requests
   stay in flight and may still land later. */
#ifdef FOLLOW
#define FOLLOWING(t) (fpend[t] != 0)
#if MAXATT == 1
#define PICKTOKEN(cond) if P1(cond,h_v,1) fi
#elif MAXATT == 2
#define PICKTOKEN(cond) if P1(cond,h_v,1) P1(cond,h_v,2) fi
#elif MAXATT == 3
#define PICKTOKEN(cond) if P1(cond,h_v,1) P1(cond,h_v,2) P1(cond,h_v,3) fi
#elif MAXATT == 4
#define PICKTOKEN(cond) if P1(cond,h_v,1) P1(cond,h_v,2) P1(cond,h_v,3) P1(cond,h_v,4) fi
#else
#error "EARLY_REL with PROP_CLEANUP or PROP_FOLLOWUP: MAXATT > 4 unsupported"
#endif
#define FTIMEOUT \
	:: PICKTOKEN(FOLLOWING); \
		printf("MSC: t=%d follow-up of token %d: timeout on node mask %d\n", now_h, h_v, fpend[h_v]); \
		fto[h_v] = fto[h_v] | fpend[h_v]; fpend[h_v] = 0; \
		follow_done(h_v, h_k)
#else
#define FTIMEOUT
#endif

/* TICK: one tick of the clock. NOCLOCK: time does not pass, keys never
   expire and every decision has validity left. */
#ifdef NOCLOCK
#define TICK
#else
#define TICK \
	:: true -> \
		now_h++; printf("MSC: ---- tick: t=%d\n", now_h); \
		for (h_k : 0 .. N-1) { \
			if \
			:: life[h_k] > 0 -> life[h_k]--; /* keys age, expire */ \
				if \
				:: life[h_k] == 0 -> key[h_k] = 0 \
				:: else \
				fi \
			:: else \
			fi; \
			if \
			:: downfor[h_k] > 0 -> downfor[h_k]-- \
			:: else \
			fi \
		}; \
		for (h_k : 0 .. C-1) { \
			if \
			:: TIMING(h_k) && el[h_k] < VWIN -> el[h_k]++ \
			:: else \
			fi; \
			if \
			:: win[h_k] > 0 -> win[h_k]-- /* windows shrink */ \
			:: else \
			fi \
		}
#endif

/* CRASH: node number `faults` crashes (node 0 first, then node 1). Nodes
   are interchangeable (every request goes to every node, and the properties
   treat all nodes alike), so a run in which other nodes crash is a renaming
   of one of these. The crash breaks the connections: all requests in flight
   to the node are lost. How it comes back depends on the mode(s) enabled. */
#ifdef CRASH_IMMEDIATE
/* state lost, back at once: unsafe (negative control a) */
#define MODE_IMMEDIATE :: key[h_n] = 0; life[h_n] = 0; cnt[h_n] = 0; markc[h_n] = 0; \
	printf("MSC: t=%d node %d CRASH, state lost, back at once\n", now_h, h_n)
#else
#define MODE_IMMEDIATE
#endif
#ifdef CRASH_DELAYED
/* state lost, restart delayed beyond the TTL: every key it had would have
   expired by then anyway */
#define MODE_DELAYED :: key[h_n] = 0; life[h_n] = 0; cnt[h_n] = 0; markc[h_n] = 0; \
	down[h_n] = 1; downfor[h_n] = TTL + 1; \
	printf("MSC: t=%d node %d CRASH, state lost, down for %d ticks\n", now_h, h_n, TTL + 1)
#else
#define MODE_DELAYED
#endif
#ifdef CRASH_PERSIST
/* state persisted (AOF, fsync always): back at any time, intact; its keys
   keep ageing meanwhile. Also stands for a network partition of the node. */
#define MODE_PERSIST :: down[h_n] = 1; \
	printf("MSC: t=%d node %d CRASH, state kept on disk\n", now_h, h_n)
#else
#define MODE_PERSIST
#endif
#if defined(CRASH_IMMEDIATE) || defined(CRASH_DELAYED) || defined(CRASH_PERSIST)
#define CRASH \
	:: faults < MAXF -> \
		h_n = faults; faults++; \
		for (h_c : 0 .. C-1) { \
			do \
			:: len(q[h_c*N + h_n]) > 0 -> q[h_c*N + h_n]?_ \
			:: else -> break \
			od NXCLEAR(h_c*N + h_n) \
		}; \
		if \
		MODE_IMMEDIATE \
		MODE_DELAYED \
		MODE_PERSIST \
		fi
#else
#define CRASH
#endif
#define ISDOWN(n) (down[n] && downfor[n] == 0)
#define RESTART \
	:: if P1(ISDOWN,h_n,0) P1(ISDOWN,h_n,1) fi; \
		down[h_n] = 0; \
		printf("MSC: t=%d node %d back up\n", now_h, h_n)

/* Property 1, mutual exclusion: no two clients are ever both inside their
   believed-held window. Windows only change inside steps, so checking it at
   the end of every step checks it in every reachable state (it is the
   invariant [] MUTEX, asserted instead of given as an LTL never claim,
   which would double the work). */
#define INW(c) (held[c] && win[c] > 0)
#if C == 2
#define MUTEX (!(INW(0) && INW(1)))
#else
#define MUTEX (!((INW(0) && INW(1)) || (INW(0) && INW(2)) || (INW(1) && INW(2))))
#endif
#ifdef PROP_MUTEX
#define CHECK_MUTEX assert(MUTEX)
#else
#define CHECK_MUTEX skip
#endif

/* The world: one process. Each iteration is one atomic step: pick any
   possible event, run it, and if it changed a client's tally, let that
   client decide at once. */
active proctype World()
{
end:
	do
	:: atomic {
		if
		TICK
		ACQUIRE
		EXTEND
		RELEASE
		DELIVER
		DROP
		OVERTAKE
		TIMEOUT
		FTIMEOUT
		CRASH
		RESTART
		fi;
		if
		:: h_dec -> decide(h_c, h_k)
		:: else
		fi;
		CHECK_MUTEX;
		SCRUB }
	od
}

