/*
 * The reader-writer lock's quorum argument (src/rwlock.rs), model-checked
 * with spin: see README.md ("The reader-writer lock"). Checked by
 * check.sh, runs r*.
 *
 * The world: N nodes, C clients; client 0 writes, the others read (WRITERS
 * sets how many clients write, from client 0 up). Each client takes the
 * lock ROUNDS times: one request to every node (each runs atomically on
 * its node, or is lost, never run), a hold if a quorum admitted it, then
 * optionally an extension on every node (restoring the hold where it is
 * missing, only where an acquire would be admitted: a lost request left
 * it missing), then a release on every node (each may be lost). Time is
 * left out (no expiry): this checks the quorum argument; the timing of a
 * hold is the lock's, checked by quorumlock.pml (P1).
 *
 * A node admits a reader where no writer holds, and a writer where no
 * writer holds and no reader is. (Writer preference, the waiting writer's
 * mark, only refuses more readers: it cannot break exclusion, and is left
 * out.)
 *
 * Property R1 (asserted whenever a client starts holding): a writer holds
 * alone; a reader holds beside readers only.
 *
 * Negative controls:
 *   NO_READER_CHECK  a node admits a writer beside live readers.
 *   NO_WRITER_CHECK  a node admits a reader beside a writer.
 */

#ifndef N
#define N 3
#endif
#define Q (N / 2 + 1)
#ifndef C
#define C 3
#endif
#ifndef WRITERS
#define WRITERS 1
#endif
#ifndef ROUNDS
#define ROUNDS 1
#endif

byte writer[N];     /* per node: the writing client + 1, 0 if none */
bool reader[N * C]; /* per node and client: admitted as a reader */
byte readers[N];    /* per node: how many readers it admitted */
byte writing = 0;   /* writers inside their holding window */
byte reading = 0;   /* readers inside their holding window */

#ifdef NO_READER_CHECK
#define WRITER_OK(n) (writer[n] == 0)
#else
#define WRITER_OK(n) (writer[n] == 0 && readers[n] == 0)
#endif
#ifdef NO_WRITER_CHECK
#define READER_OK(n) (true)
#else
#define READER_OK(n) (writer[n] == 0)
#endif

/* Node n admits client c (a writer if w) when the rules allow. */
inline admit(n, c, w, yes) {
    atomic {
        if
        :: w && WRITER_OK(n) -> writer[n] = c + 1; yes++
        :: !w && READER_OK(n) && !reader[n * C + c] ->
            reader[n * C + c] = true; readers[n]++; yes++
        :: else -> skip
        fi
    }
}

/* Node n's part of an extension: held stays held; a missing hold is set
 * again only where it would be admitted now. */
inline extend(n, c, w, yes) {
    atomic {
        if
        :: w && writer[n] == c + 1 -> skip
        :: !w && reader[n * C + c] -> skip
        :: else -> admit(n, c, w, yes)
        fi
    }
}

/* Node n's part of client c's release (or cleanup). */
inline release(n, c, w) {
    atomic {
        if
        :: w && writer[n] == c + 1 -> writer[n] = 0
        :: !w && reader[n * C + c] -> reader[n * C + c] = false; readers[n]--
        :: else -> skip
        fi
    }
}

proctype client(byte c) {
    byte n, yes, r;
    bool w = c < WRITERS;
    do
    :: r < ROUNDS ->
        r++;
        yes = 0;
        n = 0;
        do
        :: n < N ->
            if
            :: admit(n, c, w, yes)
            :: skip /* lost: never ran */
            fi;
            n++
        :: else -> break
        od;
        if
        :: yes >= Q ->
            atomic {
                if
                :: w -> assert(writing == 0 && reading == 0); writing++
                :: else -> assert(writing == 0); reading++
                fi
            }
            /* an extension, restoring where a request was lost */
            if
            :: n = 0;
               do
               :: n < N ->
                   if
                   :: extend(n, c, w, yes)
                   :: skip
                   fi;
                   n++
               :: else -> break
               od
            :: skip
            fi;
            atomic {
                if
                :: w -> writing--
                :: else -> reading--
                fi
            }
        :: else -> skip
        fi;
        n = 0;
        do
        :: n < N ->
            if
            :: release(n, c, w)
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
