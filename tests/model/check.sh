#!/usr/bin/env bash
# Model-check the quorumlock protocol with spin (see tests/model/README.md).
#
#   bash tests/model/check.sh            # from the repo root or anywhere
#   TRAILS=1 bash tests/model/check.sh   # also print each counterexample
#   JOBS=1 bash tests/model/check.sh     # one verification at a time
#   FULL=1 bash tests/model/check.sh     # bigger scopes too (long, GBs of RAM)
#
# Every verification runs in a temporary directory (spin -a, gcc pan.c,
# ./pan), removed on exit; nothing is written to the repository. Exit status
# 0 only if every property holds after a complete, exact search, and every
# negative control is violated, on the property it is meant to break.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
model="$here/quorumlock.pml"
start_time=$(date +%s)

die() { echo "check.sh: $*" >&2; exit 1; }
[ -r "$model" ] || die "cannot read $model"
command -v spin >/dev/null 2>&1 ||
    die "'spin' is not installed (Debian/Ubuntu: apt-get install -y spin; or build https://github.com/nimble-code/Spin)"
command -v gcc >/dev/null 2>&1 ||
    die "'gcc' is not installed (needed to compile spin's verifier)"

cpus=$(nproc 2>/dev/null || echo 2)
jobs_max="${JOBS:-$(( cpus < 4 ? cpus : 4 ))}"
case "$jobs_max" in ''|*[!0-9]*|0) die "JOBS must be a positive integer" ;; esac

work="$(mktemp -d "${TMPDIR:-/tmp}/quorumlock-model.XXXXXX")"
cleanup() {
    local pid
    for pid in $(jobs -p); do kill -TERM "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# One verification per line:
#   id | property | scope | expect | cc | flags [| extra pan options]
# expect = pass: spin must find no error in a complete, exact search
#          fail: spin must find a counterexample, and to the property the
#                id's row names (a negative control: a deliberately broken
#                protocol or environment)
# cc = gcc optimisation of the verifier: -O2 pays off for long searches,
#      -O0/-O1 compile faster for short ones
# The world is 3 nodes, 2 clients, TTL 3 ticks, drift 1 tick unless the flags
# say otherwise; README.md explains every flag. Longest runs first.
runs=(
"1|P1 mutex + P4 token|3 attempts, 1 crash (state lost, restart after the TTL)|pass|-O2|-DPROP_MUTEX -DPROP_TOKEN -DCRASH_DELAYED -DMAXATT=3 -DMAXEXT=0 -DMAXF=1"
"2|P2 fence|fenced, untimed, lossy (<= 1 loss): 3 attempts|pass|-O2|-DPROP_FENCE -DFENCED -DNOCLOCK -DLOSSY -DMAXLOSS=1 -DMAXATT=3 -DMAXEXT=0 -DMAXF=0"
"3|P2 fence + P1 mutex|fenced, timed: 2 attempts|pass|-O2|-DPROP_FENCE -DPROP_MUTEX -DFENCED -DMAXATT=2 -DMAXEXT=0 -DMAXF=0"
"4|P1 mutex + P3 cleanup + P4|lossy (<= 1 loss): 2 attempts|pass|-O2|-DPROP_MUTEX -DPROP_CLEANUP -DPROP_TOKEN -DLOSSY -DMAXLOSS=1 -DMAXATT=2 -DMAXEXT=0 -DMAXF=0"
"5|P1 mutex + P4 token|2 attempts, 1 extension, 1 crash (restart after TTL, or persisted)|pass|-O2|-DPROP_MUTEX -DPROP_TOKEN -DCRASH_DELAYED -DCRASH_PERSIST -DMAXATT=2 -DMAXEXT=1 -DMAXF=1"
"6|P3 cleanup + P4 token|fenced, untimed, lossy (unbounded): 2 attempts|pass|-O2|-DPROP_CLEANUP -DPROP_TOKEN -DFENCED -DNOCLOCK -DLOSSY -DMAXATT=2 -DMAXEXT=0 -DMAXF=0"
"7|P3 cleanup + P1 + P4|2 attempts, 1 crash (restart after TTL, or persisted)|pass|-O2|-DPROP_CLEANUP -DPROP_MUTEX -DPROP_TOKEN -DCRASH_DELAYED -DCRASH_PERSIST -DMAXATT=2 -DMAXEXT=0 -DMAXF=1"
"8|P2 fence + P1 + P4|fenced, timed: 2 attempts, 1 extension (restores raise the counter)|pass|-O2|-DPROP_FENCE -DPROP_MUTEX -DPROP_TOKEN -DFENCED -DMAXATT=2 -DMAXEXT=1 -DMAXF=0"
"9|P1 mutex + P4 token|release returns at a quorum (EARLY_REL): 3 attempts|pass|-O2|-DPROP_MUTEX -DPROP_TOKEN -DEARLY_REL -DMAXATT=3 -DMAXEXT=0 -DMAXF=0"
"10|P3 cleanup + P1 + P4|release returns at a quorum (EARLY_REL): 2 attempts, 1 extension|pass|-O2|-DPROP_CLEANUP -DPROP_MUTEX -DPROP_TOKEN -DEARLY_REL -DMAXATT=2 -DMAXEXT=1 -DMAXF=0"
"11|P1 mutex + P4 token|NATIVE: 2 attempts, 1 extension, 1 crash (after TTL, or persisted)|pass|-O2|-DNATIVE -DPROP_MUTEX -DPROP_TOKEN -DCRASH_DELAYED -DCRASH_PERSIST -DMAXATT=2 -DMAXEXT=1 -DMAXF=1"
"13|P3 cleanup + P1 + P4|NATIVE: 2 attempts, 1 extension|pass|-O2|-DNATIVE -DPROP_CLEANUP -DPROP_MUTEX -DPROP_TOKEN -DMAXATT=2 -DMAXEXT=1 -DMAXF=0"
"12|P1 mutex + P4 token|NATIVE_MIXED (either path per node): 2 attempts, 1 extension|pass|-O2|-DNATIVE -DNATIVE_MIXED -DPROP_MUTEX -DPROP_TOKEN -DMAXATT=2 -DMAXEXT=1 -DMAXF=0"
"14|P2 fence|fenced, untimed: 3 attempts, a retry may raise the counter instead of reusing its value (MARK_EXPIRES)|pass|-O2|-DPROP_FENCE -DFENCED -DMARK_EXPIRES -DNOCLOCK -DMAXATT=3 -DMAXEXT=0 -DMAXF=0"
"q2|Q1 mutex|fair.pml: any queue (ANYQUEUE): enter + 1 try, enter + 1 try|pass|-O2|-DPROP_MUTEX -DANYQUEUE -DTRIES0=1 -DTRIES1=1"
"q6|Q2 order + Q3 ticket|fair.pml: untimed, lossy (<= 1 loss): enter + try, 2 enters + try; enter as before (ENTER_NO_PLACE: README, Finding 6)|pass|-O2|-DPROP_ORDER -DPROP_TICKET -DNOCLOCK -DLOSSY -DMAXLOSS=1 -DENTERS1=2 -DTRIES0=1 -DTRIES1=1 -DENTER_NO_PLACE"
"q3|Q1 mutex + Q2 + Q3|fair.pml: timed, the queue as is: enter + 1 try, enter|pass|-O2|-DPROP_MUTEX -DPROP_ORDER -DPROP_TICKET -DNO_GIVEUP -DTRIES0=1 -DTRIES1=0"
"q1|Q1 mutex|fair.pml: any queue, 1 crash (back after TTL): enter + try, enter|pass|-O2|-DPROP_MUTEX -DANYQUEUE -DCRASH_DELAYED -DMAXF=1 -DTRIES0=1 -DTRIES1=0"
"q4|Q2 order + Q3 ticket|fair.pml: untimed: enter + 2 tries, enter + 1 try; enter as before (ENTER_NO_PLACE)|pass|-O2|-DPROP_ORDER -DPROP_TICKET -DNOCLOCK -DTRIES0=2 -DTRIES1=1 -DENTER_NO_PLACE"
"q5|Q2 order + Q3 ticket|fair.pml: untimed: enter + 1 try, enter + 2 tries; enter as before (ENTER_NO_PLACE)|pass|-O2|-DPROP_ORDER -DPROP_TICKET -DNOCLOCK -DTRIES0=1 -DTRIES1=2 -DENTER_NO_PLACE"
"q7|Q5 entered + Q2 + Q3|fair.pml: untimed: enter + 1 try, enter|pass|-O2|-DPROP_ENTERED -DPROP_ORDER -DPROP_TICKET -DNOCLOCK -DTRIES0=1 -DTRIES1=0"
"j|P2 fence|write-back to all, any Q acks (old src/redlock.rs)|fail|-O1|-DPROP_FENCE -DFENCED -DWB_ALL -DNOCLOCK -DLOSSY -DMAXLOSS=1 -DMAXATT=3 -DMAXEXT=0 -DMAXF=0"
"f|P2 fence|fence counter lost in a restart after the TTL|fail|-O1|-DPROP_FENCE -DFENCED -DCRASH_DELAYED -DTTL=2 -DMAXATT=2 -DMAXEXT=0 -DMAXF=1"
"i|P2 fence|write-back acknowledged by one node, not a quorum|fail|-O1|-DPROP_FENCE -DFENCED -DWB_ONE_ACK -DNOCLOCK -DLOSSY -DMAXLOSS=1 -DMAXATT=3 -DMAXEXT=0 -DMAXF=0"
"g|P2 fence|no validity re-check after the write-back|fail|-O1|-DPROP_FENCE -DFENCED -DNO_RECHECK -DTTL=2 -DMAXATT=2 -DMAXEXT=0 -DMAXF=0"
"p|P2 fence|the write-back leaves the counter's mark: a retry reuses a value a later grant's fence equals|fail|-O1|-DPROP_FENCE -DFENCED -DWB_KEEPS_MARK -DNOCLOCK -DMAXATT=3 -DMAXEXT=0 -DMAXF=0"
"a|P1 mutex|restart at once without persistence|fail|-O0|-DPROP_MUTEX -DCRASH_IMMEDIATE -DMAXATT=2 -DMAXEXT=0 -DMAXF=1"
"b|P2 fence|fenced acquire without the write-back|fail|-O0|-DPROP_FENCE -DFENCED -DNO_WRITEBACK -DNOCLOCK -DMAXATT=3 -DMAXEXT=0 -DMAXF=0"
"c|P1 mutex|validity without subtracting the elapsed time|fail|-O0|-DPROP_MUTEX -DNO_ELAPSED -DMAXATT=2 -DMAXEXT=0 -DMAXF=0"
"d|P4 token|release by plain DEL (no token check)|fail|-O0|-DPROP_TOKEN -DPLAIN_DEL -DMAXATT=2 -DMAXEXT=0 -DMAXF=0"
"e|P3 cleanup|cleanup only on the nodes that said yes|fail|-O0|-DPROP_CLEANUP -DCLEANUP_GRANTED_ONLY -DMAXATT=2 -DMAXEXT=0 -DMAXF=0"
"h|P3 cleanup|a release overtakes a late SET (other connection)|fail|-O0|-DPROP_CLEANUP -DREORDER -DMAXATT=2 -DMAXEXT=0 -DMAXF=0"
"k|P1 mutex|an extension counts a node holding another token|fail|-O0|-DPROP_MUTEX -DEXT_FOREIGN -DMAXATT=2 -DMAXEXT=1 -DMAXF=0"
"l|P1 mutex|early release, late delete is a plain DEL (no token check)|fail|-O0|-DPROP_MUTEX -DEARLY_REL -DLATE_PLAIN_DEL -DNOCLOCK -DMAXATT=3 -DMAXEXT=0 -DMAXF=0"
"m|P3 follow-up|early release, its delete overtakes its own EXT (REORDER)|fail|-O0|-DPROP_FOLLOWUP -DEARLY_REL -DREORDER -DNOCLOCK -DMAXATT=1 -DMAXEXT=1 -DMAXF=0"
"n|P1 mutex|native restore by a plain SET PX (no NX)|fail|-O1|-DNATIVE -DNATIVE_PLAIN_SET -DPROP_MUTEX -DMAXATT=2 -DMAXEXT=1 -DMAXF=0"
"o|P4 token|native restore by a plain SET PX (no NX)|fail|-O0|-DNATIVE -DNATIVE_PLAIN_SET -DPROP_TOKEN -DMAXATT=2 -DMAXEXT=1 -DMAXF=0"
"s1|S1 permits|semaphore.pml: 3 clients, 2 permits, lossy|pass|-O2|"
"s2|S1 permits|semaphore.pml: clients of 1 and of 2 permits (MIXED)|pass|-O2|-DMIXED"
"sa|S1 permits|semaphore.pml: nodes count up to 2 holders, majority grant|fail|-O0|-DNAIVE"
"sb|S1 permits|semaphore.pml: MIXED counts, no limit key|fail|-O0|-DMIXED -DNO_LIMIT"
"r1|R1 rw exclusion|rwlock.pml: 1 writer, 2 readers, lossy, restoring extensions|pass|-O2|"
"r2|R1 rw exclusion|rwlock.pml: 2 writers, 1 reader|pass|-O2|-DWRITERS=2"
"ra|R1 rw exclusion|rwlock.pml: a writer admitted beside readers|fail|-O0|-DNO_READER_CHECK"
"rb|R1 rw exclusion|rwlock.pml: a reader admitted beside a writer|fail|-O0|-DNO_WRITER_CHECK"
"qa|Q3 ticket|fair.pml: try does not raise the counter (untimed, lossy)|fail|-O0|-DPROP_TICKET -DNOCLOCK -DLOSSY -DMAXLOSS=1 -DENTERS1=2 -DTRIES0=1 -DTRIES1=0 -DNO_RAISE"
"qb|Q1 mutex|fair.pml: try grants the head with a plain SET (no NX)|fail|-O0|-DPROP_MUTEX -DTRY_PLAIN_SET -DTRIES0=0 -DTRIES1=1"
"qc|Q2 order|fair.pml: node drops the entry at GRANTED (spec's 1st try)|fail|-O0|-DPROP_ORDER -DNOCLOCK -DTRIES0=1 -DTRIES1=1 -DDEQUEUE_ON_GRANT"
"qd|Q2 order|fair.pml: enter grants without looking at the queue|fail|-O0|-DPROP_ORDER -DNOCLOCK -DTRIES0=1 -DTRIES1=0 -DENTER_NO_QCHECK"
"qe|Q5 entered|fair.pml: enter does not place a refused call in line (q7's scope)|fail|-O0|-DPROP_ENTERED -DNOCLOCK -DTRIES0=1 -DTRIES1=0 -DENTER_NO_PLACE"
"qh|Q4 heads|fair.pml: not a bug: two try rounds each count Q heads|fail|-O0|-DPROP_HEADS -DNOCLOCK -DTRIES0=1 -DTRIES1=1"
)

memlim=3072      # MB per verification (run 2 needs 1.9 GB, the others < 1.5 GB)
hashw=24         # hash table of 2^24 slots for the positive runs
if [ "${FULL:-0}" != 0 ]; then
    # Bigger scopes: tens of millions of states, several GB each.
    memlim=8192
    hashw=26
    jobs_max="${JOBS:-1}"
    runs=(
"F1|P1 mutex + P4 token|3 attempts, 1 extension, 1 crash (restart after TTL, or persisted)|pass|-O2|-DPROP_MUTEX -DPROP_TOKEN -DCRASH_DELAYED -DCRASH_PERSIST -DMAXATT=3 -DMAXEXT=1 -DMAXF=1"
"F2|P1 mutex + P4 token|lossy (unbounded): 2 attempts, 1 extension|pass|-O2|-DPROP_MUTEX -DPROP_TOKEN -DLOSSY -DMAXATT=2 -DMAXEXT=1 -DMAXF=0"
"F3|P2 fence|fenced, untimed, lossy (unbounded): 3 attempts|pass|-O2|-DPROP_FENCE -DFENCED -DNOCLOCK -DLOSSY -DMAXATT=3 -DMAXEXT=0 -DMAXF=0"
"F4|P2 fence + P1 mutex|fenced, timed, lossy (unbounded): 2 attempts|pass|-O2|-DPROP_FENCE -DPROP_MUTEX -DFENCED -DLOSSY -DMAXATT=2 -DMAXEXT=0 -DMAXF=0"
"F5|P1 mutex|5 nodes, TTL 2: 2 attempts|pass|-O2|-DPROP_MUTEX -DN=5 -DTTL=2 -DMAXATT=2 -DMAXEXT=0 -DMAXF=0"
"F6|P1 mutex|3 clients: 3 attempts|pass|-O2|-DPROP_MUTEX -DC=3 -DMAXATT=3 -DMAXEXT=0 -DMAXF=0"
"F7|P1 mutex|requests may overtake (REORDER): 2 attempts, 1 extension|pass|-O2|-DPROP_MUTEX -DREORDER -DMAXATT=2 -DMAXEXT=1 -DMAXF=0"
"F8|P2 fence + P1 mutex|fenced, timed: 2 attempts, 1 crash (persisted)|pass|-O2|-DPROP_FENCE -DPROP_MUTEX -DFENCED -DCRASH_PERSIST -DMAXATT=2 -DMAXEXT=0 -DMAXF=1"
"F9|P1 mutex + P3 cleanup + P4|lossy (unbounded): 2 attempts|pass|-O2|-DPROP_MUTEX -DPROP_CLEANUP -DPROP_TOKEN -DLOSSY -DMAXATT=2 -DMAXEXT=0 -DMAXF=0"
"F10|P1 mutex + P4 token|2 attempts, 2 extensions (restore after the restart), 1 crash (restart after TTL)|pass|-O2|-DPROP_MUTEX -DPROP_TOKEN -DCRASH_DELAYED -DMAXATT=2 -DMAXEXT=2 -DMAXF=1"
"F11|P1 mutex|early release, requests may overtake (REORDER): 2 attempts, 1 extension|pass|-O2|-DPROP_MUTEX -DEARLY_REL -DREORDER -DMAXATT=2 -DMAXEXT=1 -DMAXF=0"
"F12|Q5 entered + Q2 + Q3|fair.pml: untimed: enter + 1 try each|pass|-O2|-DPROP_ENTERED -DPROP_ORDER -DPROP_TICKET -DNOCLOCK -DTRIES0=1 -DTRIES1=1"
"${runs[@]}"
    )
fi

# The text of the assertion each property fails with (as `spin -t` prints it).
pattern() {
    case "$1" in
        "P1"*) echo 'assert\(!\(\(\(held\[0\]&&\(win\[0\]>0\)\)' ;;
        "P2"*) echo 'assert\(\(fence\[h_c\]>last_fence\)\)' ;;
        # P3 at the end of a release's follow-up (EARLY_REL), and at the
        # end of a cleanup or of a waited-for release
        "P3 follow-up"*) echo 'assert\(\(\(key\[h_[jk]\]!=[^|]*\)\|\|\(\(fto\[' ;;
        "P3"*) echo 'assert\(\(\(key\[h_k\]!=tok\[h_c\]\)\|\|\(st\[' ;;
        "P4"*) echo 'assert\(\(tokc\[key\[h_n\]\]==h_c\)\)' ;;
        "R1"*) echo 'assert\(\(\(writing==0\)&&\(reading==0\)\)\)|assert\(\(writing==0\)\)' ;;
        "S1"*) echo 'assert\(\(holders<=k\)\)|assert\(\(\(held\[i\]==0\)\|\|\(held\[i\]==k\)\)\)' ;;
        # the fair lock's (fair.pml)
        "Q1"*) echo 'assert\(!\(\(\(held\[0\]&&\(win\[0\]>0\)\)&&\(held\[1\]' ;;
        "Q2"*) echo 'assert\(\(\(\(\(h_j==h_c\)\|\|!\(\(\(pre\[h_c\]>>h_j\)&1\)\)\)\|\|!\(\(\(ph\[h_j\]==' ;;
        "Q3"*) echo 'assert\(\(\(\(h_j==h_c\)\|\|!\(\(\(pre\[h_c\]>>h_j\)&1\)\)\)\|\|\(tkt\[h_c\]>tkt\[h_j\]\)\)\)' ;;
        "Q5"*) echo 'assert\(.*pre2\[h_c\]>>h_j' ;;
        "Q4"*) echo 'assert\(!\(\(\(ph\[\(1-h_c\)\]==2\)&&\(nhead\[' ;;
        *) echo 'no such property' ;;
    esac
}

# Writes "VERDICT STATES SECONDS DETAIL..." to $work/ID/result.
run_one() {
    local id=$1 prop=$2 expect=$3 opt=$4 flags=$5 panopts=$6
    local dir="$work/$id" depth states errors t1 detail pan_pid
    mkdir -p "$dir"
    cd "$dir"
    t1=$(date +%s)
    result() { echo "$1 ${states:-?} $(( $(date +%s) - t1 )) ${2:-}" >"$dir/result"; }
    # The semaphore's (S*), the reader-writer lock's (R*) and the fair
    # lock's (Q*) properties are checked on models of their own.
    local file=quorumlock.pml
    case "$prop" in S*) file=semaphore.pml ;; R*) file=rwlock.pml ;; Q*) file=fair.pml ;; esac
    cp "$here/$file" "$file"
    # shellcheck disable=SC2086
    if ! spin $flags -a "$file" >spin.log 2>&1; then
        result ERROR "spin -a: $(grep -m1 -i error spin.log || tail -1 spin.log)"
        return 0
    fi
    # -DSAFETY: safety properties only (assertions, invalid end states);
    # -DNOREDUCE: one process, partial-order reduction has nothing to do.
    # No -DBITSTATE, -DHC or -DMA: every state is stored exactly.
    # shellcheck disable=SC2086
    if ! gcc $opt -w -DSAFETY -DNOREDUCE -DMEMLIM=$memlim -o pan pan.c >gcc.log 2>&1; then
        result ERROR "gcc: $(grep -m1 error gcc.log || tail -1 gcc.log)"
        return 0
    fi
    depth=100000
    while :; do
        # pan in the background, so that a TERM (check.sh interrupted) can
        # stop it rather than leave it running
        # shellcheck disable=SC2086
        ./pan -m$depth -w$hashw $panopts >pan.log 2>&1 &
        pan_pid=$!
        trap 'kill -TERM "$pan_pid" 2>/dev/null; exit 143' TERM
        wait "$pan_pid" || true
        trap - TERM
        if grep -q 'max search depth too small' pan.log && [ "$depth" -lt 10000000 ]; then
            depth=$(( depth * 10 ))     # searched too shallow: again, deeper
            rm -f "$file.trail"
            continue
        fi
        break
    done
    states=$(awk '/states, stored/ { print $1; exit }' pan.log)
    errors=$(awk 'match($0, /errors: [0-9]+/) { print substr($0, RSTART + 8, RLENGTH - 8); exit }' pan.log)
    if [ -z "$states" ] || [ -z "$errors" ] || ! grep -q '^Full statespace search' pan.log; then
        result ERROR "pan did not finish: $(grep -m1 -i 'error\|memory\|abort' pan.log || tail -1 pan.log)"
        return 0
    fi
    if grep -q 'max search depth too small' pan.log; then
        result INCOMPLETE "search depth limit $depth reached"
        return 0
    fi
    if grep -q 'reached -DMEMLIM bound\|out of memory' pan.log; then
        result INCOMPLETE "memory limit ${memlim} MB reached"
        return 0
    fi
    if [ "$errors" = 0 ]; then
        if grep -q 'Search not completed' pan.log; then
            result INCOMPLETE "search not completed"
        else
            result HOLDS
        fi
        return 0
    fi
    # A counterexample: replay it, and name the property it breaks.
    # shellcheck disable=SC2086
    spin -t $flags "$file" >trail.log 2>&1 || true
    detail=$(awk 'sub(/^spin: text of failed assertion: /, "") { print; exit }' trail.log)
    [ -n "$detail" ] || detail=$(grep -m1 'violated\|invalid end state' pan.log || echo "error")
    if [ "${TRAILS:-0}" != 0 ]; then
        { sed -n 's/^ *MSC: //p' trail.log |
              sed 's/spin: [^ ]*, Error: .*$/  <- here/' | tr -s ' \t' ' '
          echo "=> violated: $detail"; } >trail.txt
    fi
    local re
    re=$(pattern "$prop")
    if [[ "$detail" =~ $re ]]; then
        result VIOLATED "$detail"
    else
        result OTHER "$detail"
    fi
}

echo "quorumlock model check: ${#runs[@]} verifications, $jobs_max at a time" \
     "($(spin -V | sed -n 's/^\(Spin Version [^ ]*\).*/\1/p'))"
echo "world: 3 nodes, 2 clients, TTL 3 ticks, drift 1 tick, unless the scope says otherwise"

for row in "${runs[@]}"; do
    IFS='|' read -r id prop scope expect cc flags panopts <<<"$row"
    while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do
        wait -n || true
    done
    ( run_one "$id" "$prop" "$expect" "$cc" "$flags" "${panopts:-}" ) &
done
wait || true

status=0
printf '\n%-3s %-27s %-66s %12s %6s  %s\n' id property "scope (NEG: the broken variant)" "states" time verdict
for row in "${runs[@]}"; do
    IFS='|' read -r id prop scope expect cc flags panopts <<<"$row"
    verdict=ERROR states='?' secs='?' detail="no result"
    if [ -r "$work/$id/result" ]; then
        read -r verdict states secs detail <"$work/$id/result" || true
    fi
    if [ "$expect" = pass ]; then
        case "$verdict" in
            HOLDS) v="PASS" ;;
            VIOLATED|OTHER) v="FAIL: counterexample: $detail"; status=1 ;;
            *) v="FAIL: $verdict $detail"; status=1 ;;
        esac
        shown="$scope"
    else
        case "$verdict" in
            VIOLATED) v="PASS: violated as intended" ;;
            HOLDS) v="FAIL: NOT violated (the model misses what this control breaks)"; status=1 ;;
            OTHER) v="FAIL: violated, but not $prop: $detail"; status=1 ;;
            *) v="FAIL: $verdict $detail"; status=1 ;;
        esac
        shown="NEG: $scope"
    fi
    if [[ "$states" =~ ^[0-9]+$ ]]; then
        states=$(echo "$states" | sed -e ':a' -e 's/\([0-9]\)\([0-9]\{3\}\)\($\|,\)/\1,\2\3/' -e 'ta')
    fi
    printf '%-3s %-27s %-66s %12s %5ss  %s\n' "$id" "$prop" "$shown" "$states" "$secs" "$v"
    if [ "${TRAILS:-0}" != 0 ] && [ -s "$work/$id/trail.txt" ]; then
        sed 's/^/        /' "$work/$id/trail.txt"
    fi
done

echo
echo "total elapsed: $(( $(date +%s) - start_time )) s"
if [ "$status" = 0 ]; then
    echo "OK: every property holds in its scope; every negative control is violated as intended"
else
    echo "MODEL CHECK FAILED"
fi
exit "$status"
