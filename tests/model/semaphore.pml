/*
 * The semaphore's quorum argument (src/semaphore.rs), model-checked with
 * spin: see README.md ("The semaphore"). Checked by check.sh, runs S*.
 *
 * The world: N nodes, C clients, L permits. Each client takes a permit
 * ROUNDS times: it sends one request to every node (each request runs
 * atomically on its node, or is lost, never run: a node down or a request
 * timed out), holds the permit if a quorum granted, and then releases on
 * every node (each release may be lost too). Clients interleave in any
 * way. Time is left out: keys do not expire, so this checks the counting
 * argument, not the timing; each permit slot is a lock, whose timing is
 * checked by quorumlock.pml (P1).
 *
 * The design (default): permit i is a lock on its own key; a node grants
 * slot i when the slot is free and its limit key is absent or holds the
 * caller's count; a grant sets the limit key; a release deletes the slot
 * (token-checked) and the limit key with the node's last permit of that
 * count. A client picks any slot below its count (every choice strategy).
 *
 * Property S1 (asserted whenever a client starts holding): all holders
 * agree on the count k, and at most k hold.
 *
 * Negative controls:
 *   NAIVE     each node admits up to L holders of any token (a counter),
 *             grant on a majority: 3 holders of 2 permits (A on {1,2}, B
 *             on {2,3}, C on {1,3}).
 *   NO_LIMIT  the slot design without the limit key, with callers of
 *             different counts (MIXED): a holder of 1 permit beside one of
 *             another count.
 */

#ifndef N
#define N 3
#endif
#define Q (N / 2 + 1)
#ifndef C
#define C 3
#endif
#ifndef L
#define L 2
#endif
#ifndef ROUNDS
#define ROUNDS 1
#endif

byte slot[N * L];   /* per node and slot: the holding client + 1, 0 if free */
byte lim[N];        /* per node: the limit key's count, 0 if absent */
byte admitted[N];        /* NAIVE: how many holders each node admitted */
bool adm[N * C];    /* NAIVE: which clients each node admitted */
byte holders = 0;   /* clients inside their holding window */
byte held[C];       /* per client: the count it holds a permit under, 0 if none */

/* The count client c believes in: with MIXED, client 0 counts 1 permit
 * and the others L. */
inline count_of(c, k) {
#ifdef MIXED
    if
    :: c == 0 -> k = 1
    :: else -> k = L
    fi
#else
    k = L
#endif
}

/* Node n's answer to client c's request for slot s of a semaphore of k. */
inline acquire(n, c, s, k, yes) {
    atomic {
#ifdef NAIVE
        if
        :: admitted[n] < k && !adm[n * C + c] -> admitted[n]++; adm[n * C + c] = true; yes++
        :: else -> skip
        fi
#else
        if
#ifdef NO_LIMIT
        :: slot[n * L + s] == 0 ->
#else
        :: slot[n * L + s] == 0 && (lim[n] == 0 || lim[n] == k) ->
#endif
            slot[n * L + s] = c + 1; lim[n] = k; yes++
        :: else -> skip
        fi
#endif
    }
}

/* Node n's part of client c's release (or cleanup) of slot s. */
inline release(n, c, s, k, i) {
    atomic {
#ifdef NAIVE
        if
        :: adm[n * C + c] -> adm[n * C + c] = false; admitted[n]--
        :: else -> skip
        fi
#else
        if
        :: slot[n * L + s] == c + 1 -> slot[n * L + s] = 0
        :: else -> skip
        fi;
        /* the limit key goes with the node's last permit of its count */
        i = 0;
        do
        :: i < L && slot[n * L + i] == 0 -> i++
        :: else -> break
        od;
        if
        :: i == L && lim[n] == k -> lim[n] = 0
        :: else -> skip
        fi;
        i = 0
#endif
    }
}

proctype client(byte c) {
    byte k, s, n, yes, i, r;
    count_of(c, k);
    do
    :: r < ROUNDS ->
        r++;
        /* any slot below the count */
        s = 0;
        do
        :: s < k - 1 -> s++
        :: break
        od;
        yes = 0;
        n = 0;
        do
        :: n < N ->
            if
            :: acquire(n, c, s, k, yes)
            :: skip /* lost: never ran */
            fi;
            n++
        :: else -> break
        od;
        if
        :: yes >= Q ->
            atomic {
                i = 0;
                do
                :: i < C ->
                    assert(held[i] == 0 || held[i] == k);
                    i++
                :: else -> break
                od;
                i = 0;
                holders++;
                held[c] = k;
                assert(holders <= k)
            }
            /* holding; then done */
            atomic { holders--; held[c] = 0 }
        :: else -> skip
        fi;
        /* release, or clean up a failed attempt: on every node */
        n = 0;
        do
        :: n < N ->
            if
            :: release(n, c, s, k, i)
            :: skip /* lost */
            fi;
            n++
        :: else -> break
        od
    :: else -> break
    od
}

init {
    byte c;
    atomic {
        c = 0;
        do
        :: c < C -> run client(c); c++
        :: else -> break
        od
    }
}
