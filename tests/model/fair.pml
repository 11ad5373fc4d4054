/*
 * fair.pml -- the fair lock (a waiter queue with tickets in front of the
 * lock), model-checked with spin: see README.md ("Fair lock"). Checked by
 * check.sh, runs q*.
 *
 * The world is the lock model's (quorumlock.pml): N = 3 nodes, quorum 2;
 * C = 2 clients, each one waiter (one fair_lock call; the waiter id is the
 * client's number); one FIFO link per client and node, a request in flight
 * any number of steps; a round's timeout at any moment; discrete ticks,
 * TTL 3, drift 1 (relative timers: runs of any length); a crash of node 0
 * that loses its state (key, queue, counter) and restarts after the TTL.
 * One process; every step atomic; spin explores every order of them.
 *
 * Per node, for the one resource: the lock key K (token, remaining life),
 * the waiter queue (ent[n*C + c]: client c's entry, scored with the ticket
 * it was placed at there, 0 = none; c's final ticket tkt[c] is fixed for
 * the call), the ticket counter cnt. Node scripts, each one atomic step
 * (apply):
 *   ENT  enter(token): granted := (queue empty) and SET K token NX;
 *        t := INCR counter; not granted -> add the entry (t, id) (placed
 *        at once, behind everyone there); answer (granted, t).
 *        ENTER_NO_PLACE: no entry (the version before: a call stood in
 *        line only once its try landed)
 *   TRY  try(id, T, token): counter := max(counter, T); add or refresh the
 *        entry (T, id); not the head (smallest (score, id)) -> BEHIND; else SET
 *        K token NX (or K holds token) -> GRANTED; else HEAD_HELD. The
 *        entry stays: the client removes it once it holds.
 *        DEQUEUE_ON_GRANT: the node removes it when it says GRANTED (the
 *        spec's first version, see README.md)
 *   REL  release(token): if K == token, delete K
 *   LVE  leave(id): remove id's entry (sent only with LEAVES, see PURGE)
 * The purge of expired entries at the top of each script is a step of its
 * own (PURGE): the entry of a client that is no longer waiting (holds,
 * gave up, died: it no longer refreshes its lease) may vanish at any
 * moment. That covers every moment its leave could land too, so leaves
 * are not sent unless LEAVES is set. A waiting waiter's entries do not
 * expire (it refreshes them in time: an assumption).
 *
 * The client (fair_lock):
 *   START   an enter round: fresh token, ENT to every node. A quorum
 *           granted, validity left -> holds. Otherwise, once every node
 *           answered or timed out: cleanup (REL of the token on every node
 *           that did not refuse); with >= Q answers, T := the max of their
 *           tickets and the client queues (WAITQ); fewer: it starts over
 *           (ENTERS0 / ENTERS1 enter rounds at most), or stops
 *   RETRY   a try round, after any delay: fresh token, TRY to every node.
 *           Q GRANTED, validity left -> holds (then leaves everywhere).
 *           Otherwise, once every node answered or timed out: cleanup as
 *           above, back to WAITQ (TRIES0 / TRIES1 try rounds at most)
 *   GIVEUP  a waiter (WAITQ, or in a try round) gives up or is cancelled
 *           (cleanup of the round in flight; leaves), or dies (the same
 *           with the cleanup never landing: its requests may stay in
 *           flight for ever); it is no longer waiting
 *   RELEASE a holder releases (REL on every node); a holder that dies is
 *           one that never releases (its keys expire)
 *
 * Two abstractions keep the searches small; each is a superset of the
 * protocol's behaviours for the properties it is used for (README.md):
 *   NOCLOCK   (Q2, Q3) no clock and no K: a SET NX succeeds or fails at
 *             will (without time any key may vanish at any moment), no
 *             REL is sent (nothing to delete), and a round's validity may
 *             run out at any moment (LAPSE, in place of the ticks)
 *   ANYQUEUE  (Q1) no queue and no counters: "queue empty" and "head"
 *             are chosen anew, at will, at every request: mutual
 *             exclusion whatever the queue does; GIVEUP is then a timeout
 *             followed by no more tries, and is left out
 *
 * Properties (asserted; README.md says why they hold):
 *   Q1 PROP_MUTEX  no two clients are ever both inside their believed-held
 *                  windows [grant, round start + TTL - DRIFT)
 *   Q2 PROP_ORDER  at a grant of client c: no other client v that had
 *                  completed its enqueue on a quorum (a try round of v got
 *                  >= Q answers) before c's granting round started, and
 *                  is still waiting, is passed: for a grant by a try,
 *                  (T_c, c) < (T_v, v); a grant by enter (the fast path)
 *                  passes v, so it must not happen at all
 *   Q3 PROP_TICKET a waiter whose enter round started after v completed
 *                  its enqueue on a quorum gets a ticket > T_v
 *   Q5 PROP_ENTERED at a grant by enter (the fast path) of client c: no
 *                  other client v whose enter round had been refused by a
 *                  quorum (>= Q "not granted" answers) before c's round
 *                  started, and is still in its call, is passed
 *   Q4 PROP_HEADS  (an observation, not a property: it is violated) no
 *                  two clients' try rounds each count Q head answers
 *                  (GRANTED or HEAD_HELD) at the same time
 *
 * Negative controls (spin must find a counterexample):
 *   NO_RAISE          try does not raise the counter        -> Q3
 *   TRY_PLAIN_SET     try grants the head with SET, no NX   -> Q1
 *   DEQUEUE_ON_GRANT  the node drops the entry at GRANTED   -> Q2
 *   ENTER_NO_QCHECK   enter grants without looking at the queue -> Q2
 *   ENTER_NO_PLACE    enter does not place a refused call in line -> Q5
 *
 * Other flags: LOSSY + MAXLOSS (a request may be lost before it runs),
 * CRASH_DELAYED + MAXF (at most 1), ENTERS0, ENTERS1, TRIES0, TRIES1
 * (rounds per client), NO_GIVEUP (no GIVEUP step), LEAVES (send the
 * leaves).
 */

#ifndef N
#define N 3
#endif
#define Q (N/2 + 1)
#define C 2                        /* the world is written for 2 clients   */
#define L (C*N)
#ifndef TTL
#define TTL 3
#endif
#ifndef DRIFT
#define DRIFT 1
#endif
#define VWIN (TTL - DRIFT)         /* validity of a grant taken at once    */
#ifndef ENTERS0
#define ENTERS0 1                  /* enter rounds of client 0             */
#endif
#ifndef ENTERS1
#define ENTERS1 ENTERS0            /* ... and of client 1                  */
#endif
#define ENTERSOF(c) ((c) == 0 -> ENTERS0 : ENTERS1)
#ifndef TRIES0
#define TRIES0 2                   /* try rounds of client 0               */
#endif
#ifndef TRIES1
#define TRIES1 TRIES0              /* ... and of client 1                  */
#endif
#define TRIESOF(c) ((c) == 0 -> TRIES0 : TRIES1)
#define ROUNDS (ENTERS0 + ENTERS1 + TRIES0 + TRIES1)
#ifndef MAXF
#define MAXF 0
#endif
#if MAXF > 1
#error "at most 1 crash (node 0)"
#endif
#if MAXF > 0 && defined(NOCLOCK)
#error "a crash needs the clock (restart after the TTL)"
#endif
#if defined(TRY_PLAIN_SET) && defined(NOCLOCK)
#error "TRY_PLAIN_SET needs K (the clock)"
#endif
#if C * ROUNDS > 31
#error "tokens must fit in 5 bits"
#endif
/* requests in flight per link (one client's), at most: a request and a
   cleanup per round, a leave, a release; without a clock only the
   requests and the leave (no K: no cleanup, no release) */
#define MAXR0 (ENTERS0 + TRIES0)
#define MAXR1 (ENTERS1 + TRIES1)
#if MAXR0 > MAXR1
#define MAXR MAXR0
#else
#define MAXR MAXR1
#endif
#ifdef NOCLOCK
#define LINKCAP (MAXR + 1)
#else
#define LINKCAP (2*MAXR + 2)
#endif

/* requests: one byte, the kind and the token */
#define ENT 1
#define TRY 2
#define REL 3
#define LVE 4
#define MSG(op, v) ((op) * 32 + (v))
#define OPOF(m)    ((m) / 32)
#define ARGOF(m)   ((m) % 32)

/* answers */
#define YES  1   /* enter: granted; try: GRANTED                  */
#define NO   2   /* enter: not granted; try: BEHIND               */
#define HELD 3   /* try: HEAD_HELD (the head, K held)             */

/* per-link status of the current round */
#define IDLE 0   /* nothing to do there: not in the round, or the node
                    answered without setting K                     */
#define WAIT 1   /* request sent, no answer yet                   */
#define MAYHOLD 2 /* answered yes, or timed out: the node may hold the
                    round's token (its cleanup goes there)         */

/* client phases */
#define P_NEW   0   /* no round yet, or starting over               */
#define P_ENTER 1   /* enter round in flight                        */
#define P_TRY   2   /* try round in flight                          */
#define P_WAITQ 3   /* queued, between try rounds                   */
#define P_HOLD  4   /* holds the lock                               */
#define P_DONE  5   /* released, gave up, died, out of enter rounds */
#define LIVE(c) (ph[c] == P_TRY || ph[c] == P_WAITQ)   /* waiting */

/* ------------------------------------------------------------------ state */

#ifndef NOCLOCK
byte key[N];        /* token in K, 0 = none                               */
byte life[N];       /* ticks before K expires (up to DRIFT earlier)       */
#endif
#ifndef ANYQUEUE
byte cnt[N];        /* ticket counter                                     */
byte ent[N*C];      /* ent[n*C + c]: client c's entry in node n's queue,
                       its score (the ticket it was placed at), 0 = none  */
#endif
#if MAXF > 0
bool down[N];
byte downfor[N];
byte faults;
#define DOWN(k) down[k]
#else
#define DOWN(k) false
#endif
#if defined(LOSSY) && defined(MAXLOSS)
byte losses;
#define CAN_LOSE   (losses < MAXLOSS)
#define COUNT_LOSS losses++
#else
#define CAN_LOSE   true
#define COUNT_LOSS skip
#endif

chan q[L] = [LINKCAP] of { byte };   /* link c*N + n: client c -> node n */

byte st[L];         /* status per link of the current round, IDLE ..      */
byte nyes[C];       /* granted / GRANTED answers                          */
byte nans[C];       /* answers of any kind                                */
byte nwait[C];      /* requests still unanswered                          */
byte tmax[C];       /* enter round: the max ticket among the answers      */
#ifdef PROP_HEADS
byte nhead[C];      /* try round: GRANTED + HEAD_HELD answers             */
#define CLRHEADS(c) nhead[c] = 0
#else
#define CLRHEADS(c) skip
#endif

byte ph[C];
byte tok[C];        /* token of the current round / of the held lock      */
byte tkt[C];        /* the waiter's ticket T                              */
byte nent[C];       /* enter rounds so far                                */
byte ntry[C];       /* try rounds so far                                  */
#ifndef NOCLOCK
byte el[C];         /* ticks since the round started (saturates at VWIN)  */
#else
bool el[C];         /* NOCLOCK: the round's validity has run out          */
#endif
bool held[C];       /* believes it holds the lock ...                     */
#ifdef PROP_MUTEX
byte win[C];        /* ... for this many more ticks                       */
#endif

/* a fresh token per round: client c's k-th round (k from 1) has token
   c*ROUNDS + k, a function of the client and its round counts (a global
   counter would number them by interleaving: more states, same runs) */
#define TOKEN(c) ((c) * ROUNDS + nent[c] + ntry[c])

#if defined(PROP_ORDER) || defined(PROP_TICKET)
byte enqd;          /* ghost, bit c: a try round of c got >= Q answers:
                       c's entry was added on a quorum                    */
byte pre[C];        /* ghost: enqd (the others') when c's round started   */
#define SNAP(c)  pre[c] = enqd & ~(1 << (c))
#define UNSNAP(c) pre[c] = 0
#define ENQD(c)  enqd = enqd | (1 << (c))
#else
#define SNAP(c)  skip
#define UNSNAP(c) skip
#define ENQD(c)  skip
#endif

#ifdef PROP_ENTERED
byte entd;          /* ghost, bit c: c's enter round got >= Q refusals: it
                       was placed in line on a quorum                     */
byte pre2[C];       /* ghost: entd (the others') when c's round started   */
#define SNAP2(c)  pre2[c] = entd & ~(1 << (c))
#define UNSNAP2(c) pre2[c] = 0
#define ENTD(c)   entd = entd | (1 << (c))
#else
#define SNAP2(c)  skip
#define UNSNAP2(c) skip
#define ENTD(c)   skip
#endif

/* scratch, inside one atomic step only: not in the state vector */
hidden byte h_dec, h_c, h_n, h_i, h_k, h_m, h_r, h_v, h_j, h_b, h_s;
hidden byte now_h;  /* tick counter, for trails only */
#define SCRUB h_dec = 0; h_c = 0; h_n = 0; h_i = 0; h_k = 0; h_m = 0; \
	h_r = 0; h_v = 0; h_j = 0; h_b = 0; h_s = 0

/* (T_a, a) < (T_b, b): a's ticket is ahead of b's */
#define BEFORE(a, b) (tkt[a] < tkt[b] || (tkt[a] == tkt[b] && (a) < (b)))
/* a is ahead of b in node n's queue (by the scores there, then id) */
#define AHEADON(n, a, b) (ent[(n)*C + (a)] < ent[(n)*C + (b)] || \
	(ent[(n)*C + (a)] == ent[(n)*C + (b)] && (a) < (b)))

#ifdef NOCLOCK
#define VALID(c)  (!el[c])
#define WINDOW(c) VWIN
#define SETEL(c, v) el[c] = (v)
#else
#define VALID(c)  (el[c] < VWIN)
#define WINDOW(c) (VWIN - el[c])
#define SETEL(c, v) el[c] = (v)
#endif
#ifdef PROP_MUTEX
#define SETWIN(c, w) win[c] = (w)
#else
#define SETWIN(c, w) skip
#endif

inline say_op(op)
{
	if
	:: op == ENT -> printf("ENTER")
	:: op == TRY -> printf("TRY")
	:: op == REL -> printf("REL")
	:: op == LVE -> printf("LEAVE")
	:: else -> printf("?")
	fi
}

inline say_ans(op, r)
{
	if
	:: op == ENT && r == YES -> printf("granted")
	:: op == ENT && r != YES -> printf("not granted")
	:: op == TRY && r == YES -> printf("GRANTED")
	:: op == TRY && r == NO -> printf("BEHIND")
	:: op == TRY && r == HELD -> printf("HEAD_HELD")
	:: else -> printf("done")
	fi
}

/* ------------------------------------------------------ the client's side */

inline clear_tally(c)
{
	nyes[c] = 0; nans[c] = 0; nwait[c] = 0; tmax[c] = 0; CLRHEADS(c)
}

inline close_op(c, k)
{
	clear_tally(c); UNSNAP(c); UNSNAP2(c);
	for (k : 0 .. N-1) { st[c*N + k] = IDLE };
	k = 0
}

/* a request of client c to node k: lost if the node is down */
inline send(c, k, op, v)
{
	if
	:: DOWN(k) -> skip
	:: else ->
		assert(len(q[c*N + k]) < LINKCAP);   /* never blocks */
		q[c*N + k]!MSG(op, v)
	fi
}

/* a round: its request to every node, answers tallied */
inline fanout(c, k, op)
{
	clear_tally(c);
	for (k : 0 .. N-1) {
		send(c, k, op, tok[c]); st[c*N + k] = WAIT; nwait[c]++
	};
	k = 0
}

/* the cleanup of a failed round (also of a cancelled one): REL of its
   token on every node that may hold it, i.e. all but those that answered
   without setting K (not granted / BEHIND / HEAD_HELD), as a failed lock
   attempt skips the nodes that refused. (Without a clock there is no K:
   nothing is sent.) */
inline cleanup(c, k)
{
#ifndef NOCLOCK
	for (k : 0 .. N-1) {
		if
		:: st[c*N + k] == IDLE -> skip
		:: else -> send(c, k, REL, tok[c])
		fi
	};
	k = 0
#else
	skip
#endif
}

/* the leave on every node (LEAVES only: otherwise PURGE covers it) */
inline leave(c, k)
{
#ifdef LEAVES
	for (k : 0 .. N-1) { send(c, k, LVE, 0) };
	k = 0
#else
	skip
#endif
}

/* Q2: client c is granted. A waiter v that completed its enqueue on a
   quorum before c's round started and still waits must not be passed:
   by a try only if c is ahead of v; by enter (the fast path) never. */
inline check_order(c)
{
#ifdef PROP_ORDER
	for (h_j : 0 .. C-1) {
		assert(h_j == c || !((pre[c] >> h_j) & 1) || !LIVE(h_j) ||
		       (ph[c] == P_TRY && BEFORE(c, h_j)))
	};
	h_j = 0
#else
	skip
#endif
}

/* Q3: c's enter round gave it ticket tkt[c]: larger than the ticket of
   every waiter that had completed its enqueue on a quorum before the round
   started */
inline check_ticket(c)
{
#ifdef PROP_TICKET
	for (h_j : 0 .. C-1) {
		assert(h_j == c || !((pre[c] >> h_j) & 1) || tkt[c] > tkt[h_j])
	};
	h_j = 0
#else
	skip
#endif
}

/* Q5: client c is granted by enter (the fast path). A call v whose enter
   round had been refused by a quorum before c's round started (v stands
   in line there) and is still in its call must not be passed. */
inline check_entered(c)
{
#ifdef PROP_ENTERED
	for (h_j : 0 .. C-1) {
		assert(h_j == c || ph[c] != P_ENTER || !((pre2[c] >> h_j) & 1) ||
		       !(LIVE(h_j) || ph[h_j] == P_ENTER))
	};
	h_j = 0
#else
	skip
#endif
}

inline grant(c, k)
{
	check_order(c);
	check_entered(c);
	printf("MSC: t=%d client %d HOLDS the lock, token %d, by ", now_h, c, tok[c]);
	if
	:: ph[c] == P_ENTER -> printf("enter")
	:: else -> printf("try")
	fi;
	printf(", window %d ticks\n", WINDOW(c));
	held[c] = 1; SETWIN(c, WINDOW(c));
	if
	:: ph[c] == P_TRY -> leave(c, k)
	:: else
	fi;
	SETEL(c, 0); close_op(c, k); ph[c] = P_HOLD
}

/* The decision, as soon as it is known: a grant at Q yes with validity
   left; a failure once every node answered or timed out (the timeout fires
   at any moment, so this also covers every earlier failure) */
inline decide(c, k)
{
	if
	:: (ph[c] == P_ENTER || ph[c] == P_TRY) && nyes[c] >= Q && VALID(c) ->
		grant(c, k)
	:: ph[c] == P_ENTER && !(nyes[c] >= Q && VALID(c)) && nwait[c] == 0 ->
		printf("MSC: t=%d client %d enter failed (granted=%d answers=%d)\n",
		       now_h, c, nyes[c], nans[c]);
		cleanup(c, k);
		if
		:: nans[c] >= Q ->
			tkt[c] = tmax[c];
			printf("MSC: t=%d client %d queues with ticket %d\n", now_h, c, tkt[c]);
			check_ticket(c);
			ph[c] = P_WAITQ
		:: else ->
			/* fewer than Q answers: start over, or stop */
			if
			:: nent[c] < ENTERSOF(c) -> ph[c] = P_NEW
			:: else -> ph[c] = P_DONE
			fi
		fi;
		SETEL(c, 0); tok[c] = 0; close_op(c, k)
	:: ph[c] == P_TRY && !(nyes[c] >= Q && VALID(c)) && nwait[c] == 0 ->
		printf("MSC: t=%d client %d try failed (granted=%d answers=%d)\n",
		       now_h, c, nyes[c], nans[c]);
		cleanup(c, k);
		SETEL(c, 0); tok[c] = 0; close_op(c, k); ph[c] = P_WAITQ
	:: else
	fi
}

/* --------------------------------------------------------------- the node */

/* h_b := 1 iff client c's entry heads node n's queue */
inline ishead(n, c)
{
#ifdef ANYQUEUE
	if
	:: h_b = 1
	:: h_b = 0
	fi
#else
	h_b = ent[n*C + c];
	for (h_j : 0 .. C-1) {
		if
		:: h_j != c && ent[n*C + h_j] && !AHEADON(n, c, h_j) -> h_b = 0
		:: else
		fi
	};
	h_j = 0
#endif
}

/* h_b := 1 iff node n's queue is empty */
inline qempty(n)
{
#ifdef ANYQUEUE
	if
	:: h_b = 1
	:: h_b = 0
	fi
#else
	h_b = 1;
	for (h_j : 0 .. C-1) {
		if
		:: ent[n*C + h_j] -> h_b = 0
		:: else
		fi
	};
	h_j = 0
#endif
}

/* SET K v NX on node n: h_s := 1 iff it set the key. Without a clock K is
   left out: any key could have vanished a moment before, so the SET may
   succeed or fail, either way, at every request (a superset of what K
   allows; only Q1 depends on K, and Q1 is checked with the clock). */
inline setnx(n, v)
{
#ifdef NOCLOCK
	if
	:: h_s = 1
	:: h_s = 0
	fi
#else
	if
	:: key[n] == 0 -> key[n] = v; life[n] = TTL; h_s = 1
	:: else -> h_s = 0
	fi
#endif
}

/* node n runs request m of client c (link i), atomically */
inline apply(i, c, n, m)
{
	assert(!DOWN(n));
	printf("MSC: t=%d node %d runs ", now_h, n); say_op(OPOF(m));
	printf(" %d from client %d", ARGOF(m), c);
#ifndef NOCLOCK
	/* bounded drift: the node may drop K up to DRIFT ticks early */
	if
	:: key[n] != 0 && life[n] <= DRIFT -> key[n] = 0; life[n] = 0
	:: true
	fi;
#endif
	h_r = NO; h_v = 0;
	if
	:: OPOF(m) == ENT ->
		qempty(n);
#ifdef ENTER_NO_QCHECK
		h_b = 1;                    /* control: the queue is not looked at */
#endif
		if
		:: h_b -> setnx(n, ARGOF(m));
			if
			:: h_s -> h_r = YES
			:: else
			fi
		:: else
		fi;
#ifndef ANYQUEUE
		cnt[n]++; h_v = cnt[n];
#ifndef ENTER_NO_PLACE
		/* refused: placed in line at once, at the ticket drawn here */
		if
		:: h_r != YES -> ent[n*C + c] = h_v
		:: else
		fi
#endif
#endif
	:: OPOF(m) == TRY ->
#ifndef ANYQUEUE
#ifndef NO_RAISE
		if
		:: cnt[n] < tkt[c] -> cnt[n] = tkt[c]
		:: else
		fi;
#endif
		ent[n*C + c] = tkt[c];
#endif
		ishead(n, c);
		if
		:: !h_b -> h_r = NO                                   /* BEHIND */
#ifdef TRY_PLAIN_SET
		:: h_b -> key[n] = ARGOF(m); life[n] = TTL; h_r = YES   /* control */
#else
		:: h_b ->
			setnx(n, ARGOF(m));
			if
			:: h_s -> h_r = YES                        /* GRANTED */
#ifndef NOCLOCK
			:: !h_s && key[n] == ARGOF(m) -> h_r = YES /* already ours */
			:: !h_s && key[n] != ARGOF(m) -> h_r = HELD
#else
			:: !h_s -> h_r = HELD
#endif
			fi
#endif
		fi;
#if defined(DEQUEUE_ON_GRANT) && !defined(ANYQUEUE)
		if
		:: h_r == YES -> ent[n*C + c] = 0
		:: else
		fi;
#endif
		skip
	:: OPOF(m) == REL ->
#ifndef NOCLOCK
		if
		:: key[n] == ARGOF(m) -> key[n] = 0; life[n] = 0
		:: else
		fi
#else
		skip
#endif
	:: OPOF(m) == LVE ->
#ifndef ANYQUEUE
		ent[n*C + c] = 0
#else
		skip
#endif
	fi;
	printf(" -> "); say_ans(OPOF(m), h_r);
#ifndef NOCLOCK
	printf(" key=%d", key[n]);
#endif
#ifndef ANYQUEUE
	if
	:: OPOF(m) == ENT -> printf(" t=%d", h_v)
	:: else
	fi;
	printf(" (cnt=%d queue=%d%d)", cnt[n], ent[n*C], ent[n*C + 1]);
#endif
	printf("\n");
	/* the answer counts if the client still waits for this very round
	   (tokens are fresh per round) */
	if
	:: st[i] == WAIT && ARGOF(m) == tok[c] &&
	   ((OPOF(m) == ENT && ph[c] == P_ENTER) || (OPOF(m) == TRY && ph[c] == P_TRY)) ->
		nwait[c]--; nans[c]++;
		if
		:: h_r == YES -> nyes[c]++; st[i] = MAYHOLD
		:: else -> st[i] = IDLE
		fi;
		if
		:: h_v > tmax[c] -> tmax[c] = h_v
		:: else
		fi;
		if
		:: OPOF(m) == TRY && nans[c] >= Q -> ENQD(c)
		:: else
		fi;
		if
		:: OPOF(m) == ENT && nans[c] - nyes[c] >= Q -> ENTD(c)
		:: else
		fi;
#ifdef PROP_HEADS
		if
		:: h_r == YES || h_r == HELD -> nhead[c]++
		:: else
		fi;
		if
		:: OPOF(m) == TRY && nhead[c] >= Q ->
			assert(!(ph[1 - c] == P_TRY && nhead[1 - c] >= Q))
		:: else
		fi;
#endif
		h_dec = 1
	:: else
	fi
}

/* ------------------------------------------------ choosing who moves next */

#define P1(cond, var, x) :: cond(x) -> var = x
#if L != 6
#error "the world is written for 3 nodes and 2 clients"
#endif
#define PICK6(cond, var) if P1(cond,var,0) P1(cond,var,1) P1(cond,var,2) \
	P1(cond,var,3) P1(cond,var,4) P1(cond,var,5) fi
#define PICKCLIENT(cond) if P1(cond,h_c,0) P1(cond,h_c,1) fi
#define PICKNODE(cond) if P1(cond,h_n,0) P1(cond,h_n,1) P1(cond,h_n,2) fi

/* ----------------------------------------------------------------- steps */

/* START: an enter round with a fresh token */
#define CAN_START(c) (ph[c] == P_NEW && nent[c] < ENTERSOF(c))
#define START \
	:: PICKCLIENT(CAN_START); \
		nent[h_c]++; tok[h_c] = TOKEN(h_c); SETEL(h_c, 0); \
		SNAP(h_c); SNAP2(h_c); ph[h_c] = P_ENTER; \
		printf("MSC: t=%d client %d ENTER token %d\n", now_h, h_c, tok[h_c]); \
		fanout(h_c, h_k, ENT)

/* RETRY: a try round with a fresh token, after any delay */
#define CAN_RETRY(c) (ph[c] == P_WAITQ && ntry[c] < TRIESOF(c))
#define RETRY \
	:: PICKCLIENT(CAN_RETRY); \
		ntry[h_c]++; tok[h_c] = TOKEN(h_c); SETEL(h_c, 0); \
		SNAP(h_c); ph[h_c] = P_TRY; \
		printf("MSC: t=%d client %d TRY ticket %d token %d\n", now_h, h_c, tkt[h_c], tok[h_c]); \
		fanout(h_c, h_k, TRY)

/* GIVEUP: a waiter gives up, is cancelled, or dies: the cleanup of its try
   round in flight, if any, and its leaves (a death: the same, never
   landing); it no longer waits */
#if defined(ANYQUEUE) || defined(NO_GIVEUP)
#define GIVEUP     /* no queue: a give-up is a timeout and no more tries */
#else
#define GIVEUP \
	:: PICKCLIENT(LIVE); \
		printf("MSC: t=%d client %d GIVES UP\n", now_h, h_c); \
		if \
		:: ph[h_c] == P_TRY -> cleanup(h_c, h_k) \
		:: else \
		fi; \
		leave(h_c, h_k); \
		SETEL(h_c, 0); tok[h_c] = 0; close_op(h_c, h_k); ph[h_c] = P_DONE
#endif

/* RELEASE: the holder releases, token-checked, on every node. Without a
   clock it only stops holding (keys vanish at any moment anyway). */
#ifdef NOCLOCK
#define RELSEND(c) skip
#else
#define RELSEND(c) for (h_k : 0 .. N-1) { send(c, h_k, REL, tok[c]) }; h_k = 0
#endif
#ifdef PROP_MUTEX
#define CLRWIN(c) win[c] = 0
#else
#define CLRWIN(c) skip
#endif
#define CAN_RELEASE(c) (ph[c] == P_HOLD)
#define RELEASE \
	:: PICKCLIENT(CAN_RELEASE); \
		printf("MSC: t=%d client %d RELEASES token %d\n", now_h, h_c, tok[h_c]); \
		held[h_c] = 0; CLRWIN(h_c); RELSEND(h_c); \
		tok[h_c] = 0; ph[h_c] = P_DONE

/* DELIVER: the oldest request on a link runs on its node */
#define LINKHAS(i) (len(q[i]) > 0)
#define DELIVER \
	:: PICK6(LINKHAS, h_i); \
		h_c = h_i / N; h_n = h_i % N; \
		q[h_i]?h_m; \
		apply(h_i, h_c, h_n, h_m)

/* DROP (LOSSY): the oldest request on a link is lost, never runs */
#ifdef LOSSY
#define LOSABLE(i) (len(q[i]) > 0 && CAN_LOSE)
#define DROP \
	:: PICK6(LOSABLE, h_i); \
		COUNT_LOSS; q[h_i]?h_m; \
		printf("MSC: t=%d request ", now_h); say_op(OPOF(h_m)); \
		printf(" %d from client %d to node %d LOST\n", ARGOF(h_m), h_i / N, h_i % N)
#else
#define DROP
#endif

/* TIMEOUT: the round's deadline: every node still pending has failed
   (its request may land later: the cleanup goes there) */
#ifdef NOCLOCK
#define TOUTST IDLE
#else
#define TOUTST MAYHOLD
#endif
#define WAITING(c) (nwait[c] > 0)
#define TIMEOUT \
	:: PICKCLIENT(WAITING); \
		printf("MSC: t=%d client %d: timeout on %d node(s)\n", now_h, h_c, nwait[h_c]); \
		for (h_k : 0 .. N-1) { \
			if \
			:: st[h_c*N + h_k] == WAIT -> st[h_c*N + h_k] = TOUTST \
			:: else \
			fi \
		}; \
		nwait[h_c] = 0; \
		h_dec = 1

/* PURGE: an entry of a client that no longer waits expires (it stopped
   refreshing its lease) */
#ifdef ANYQUEUE
#define PURGE
#else
/* a call's entries last while it is in its call: waiting (LIVE), or in
   or between its enter rounds (placed by a refused enter) */
#define INCALL(c) (LIVE(c) || ph[c] == P_ENTER || ph[c] == P_NEW)
#define PURGABLE(x) (ent[x] && !INCALL((x) % C))
#define PURGE \
	:: PICK6(PURGABLE, h_i); \
		ent[h_i] = 0; \
		printf("MSC: t=%d node %d: entry of client %d expired\n", now_h, h_i / C, h_i % C)
#endif

/* TICK: a tick of the clock. NOCLOCK: no clock, but a round's validity
   may run out at any moment (LAPSE), as time would make it */
#ifdef NOCLOCK
#define LAPSABLE(c) ((ph[c] == P_ENTER || ph[c] == P_TRY) && !el[c])
#define TICK \
	:: PICKCLIENT(LAPSABLE); \
		el[h_c] = 1; \
		printf("MSC: client %d: the round's validity ran out\n", h_c)
#else
#if MAXF > 0
#define DOWNTICK(k) if :: downfor[k] > 0 -> downfor[k]-- :: else fi
#else
#define DOWNTICK(k) skip
#endif
#ifdef PROP_MUTEX
#define WINTICK(k) if :: win[k] > 0 -> win[k]-- :: else fi
#else
#define WINTICK(k) skip
#endif
#define TICK \
	:: true -> \
		now_h++; printf("MSC: ---- tick: t=%d\n", now_h); \
		for (h_k : 0 .. N-1) { \
			if \
			:: life[h_k] > 0 -> life[h_k]--; \
				if \
				:: life[h_k] == 0 -> key[h_k] = 0 \
				:: else \
				fi \
			:: else \
			fi; \
			DOWNTICK(h_k) \
		}; \
		for (h_k : 0 .. C-1) { \
			if \
			:: (ph[h_k] == P_ENTER || ph[h_k] == P_TRY) && el[h_k] < VWIN -> el[h_k]++ \
			:: else \
			fi; \
			WINTICK(h_k) \
		}
#endif

/* CRASH (CRASH_DELAYED): node 0 loses its state (key, queue, counter) and
   every request in flight to it, and is back after more than the TTL */
#if MAXF > 0
#ifdef ANYQUEUE
#define CRASHQ(n)
#else
#define CRASHQ(n) cnt[n] = 0; for (h_c : 0 .. C-1) { ent[(n)*C + h_c] = 0 }; h_c = 0;
#endif
#define CRASH \
	:: faults < MAXF -> \
		h_n = faults; faults++; \
		for (h_c : 0 .. C-1) { \
			do \
			:: len(q[h_c*N + h_n]) > 0 -> q[h_c*N + h_n]?_ \
			:: else -> break \
			od \
		}; \
		h_c = 0; CRASHQ(h_n) \
		key[h_n] = 0; life[h_n] = 0; \
		down[h_n] = 1; downfor[h_n] = TTL + 1; \
		printf("MSC: t=%d node %d CRASH, state lost, down for %d ticks\n", now_h, h_n, TTL + 1)
#define ISDOWN(n) (down[n] && downfor[n] == 0)
#define RESTART \
	:: PICKNODE(ISDOWN); \
		down[h_n] = 0; \
		printf("MSC: t=%d node %d back up\n", now_h, h_n)
#else
#define CRASH
#define RESTART
#endif

/* Q1: mutual exclusion, checked after every step */
#ifdef PROP_MUTEX
#define INW(c) (held[c] && win[c] > 0)
#define CHECK_MUTEX assert(!(INW(0) && INW(1)))
#else
#define CHECK_MUTEX skip
#endif

active proctype World()
{
end:
	do
	:: atomic {
		if
		START
		RETRY
		DELIVER
		TIMEOUT
		RELEASE
		GIVEUP
		PURGE
		DROP
		CRASH
		RESTART
		TICK
		fi;
		if
		:: h_dec -> decide(h_c, h_k)
		:: else
		fi;
		CHECK_MUTEX;
		SCRUB }
	od
}
