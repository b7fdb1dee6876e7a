#!/usr/bin/env bash
# Reliability checks (docs/RELIABILITY.md). Each subcommand prints a
# summary line with its counts; CI greps them.
#
#   .ci/reliability.sh [ci]                 everything below at CI length (~3-4 min on 2 cores)
#   .ci/reliability.sh sim                  simulated power loss   (CAIRN_CRASH_POINTS, default 2000)
#   .ci/reliability.sh faults               fault injection        (CAIRN_FAULT_POINTS, default 1500)
#   .ci/reliability.sh disk-full            a real full disk (tmpfs); skips unless root
#   .ci/reliability.sh kill-torture [--trials N] [--durability sync|group|buffered|mixed]
#                                           SIGKILL `cairn append` at random moments (default 20 trials)
#   .ci/reliability.sh fuzz-smoke [--seconds S]
#                                           each fuzz target for S seconds (default 20)
#   .ci/reliability.sh long                 the release check: 100000 crash points,
#                                           20000 faults, 1000 kills (CAIRN_LONG_KILLS), 100 MB lines,
#                                           10 min per fuzz target (CAIRN_LONG_FUZZ_SECONDS)
#
# Environment: CAIRN_BIN (a built `cairn`, else target/release/cairn is built).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

say() { printf '\n--- reliability: %s ---\n' "$*"; }

# Cleanup on exit: mounts to undo, then directories to remove.
mounts=()
dirs=()
cleanup() {
    local m d
    for m in "${mounts[@]}"; do umount "$m" 2>/dev/null || true; done
    for d in "${dirs[@]}"; do rm -rf "$d"; done
}
trap cleanup EXIT

cairn_bin() {
    if [[ -n "${CAIRN_BIN:-}" ]]; then
        echo "$CAIRN_BIN"
        return
    fi
    cargo build --release --locked -p cairn-cli >&2
    echo "${CARGO_TARGET_DIR:-$root/target}/release/cairn"
}

# A JSON-lines record for `cairn append`.
LINE='{"kind":"message","data":{"role":"user","content":[{"type":"text","text":"the quick brown fox jumps over the lazy dog, again and again and again"}]}}'

# check_acks ACKS FILE: every complete ack line {"seq":N,"id":"X"} names a
# record of FILE (line N+1 starts with {"seq":N, and carries "id":"X").
# Prints the number of acks checked; exits 1 naming the first missing one.
check_acks() {
    awk '
        FNR == NR {
            # The session file: record seq = line number - 1. Only complete
            # lines count (awk sees a final line without newline too; a torn
            # tail never matches an ack below because its checksum is wrong,
            # but we still require the prefix and id).
            rec[FNR - 1] = $0
            next
        }
        /^\{"seq":[0-9]+,"id":/ && /\}$/ {
            seq = $0; sub(/^\{"seq":/, "", seq); sub(/,.*/, "", seq)
            id = $0; sub(/.*"id":/, "", id); sub(/\}$/, "", id)
            r = rec[seq]
            if (index(r, "{\"seq\":" seq ",") != 1) { printf "missing: acknowledged record %s is not in the file\n", seq > "/dev/stderr"; bad = 1; exit 1 }
            if (id != "null" && index(r, "\"id\":" id) == 0) { printf "changed: record %s does not carry id %s\n", seq, id > "/dev/stderr"; bad = 1; exit 1 }
            n++
        }
        END { if (!bad) print n }
    ' "$2" "$1"
}

run_sim() {
    say "simulated power loss"
    cargo test -p cairn --test sim_crash -- --nocapture --exact \
        acknowledged_records_survive_thousands_of_simulated_power_losses \
        the_crash_checker_catches_a_disk_that_ignores_fsync \
        the_crash_checker_catches_a_model_that_trusts_buffered_acknowledgements \
        an_index_never_makes_an_open_accept_records_a_power_loss_took 2>&1 |
        grep -E '^sim_crash:|^test |test result|panicked|seed' || return 1
}

run_faults() {
    say "fault injection"
    cargo test -p cairn --test fault_injection -- --nocapture --exact \
        every_injected_fault_is_reported_poisons_and_loses_nothing_acknowledged \
        a_full_disk_on_an_append_names_the_file_says_no_space_and_poisons_until_reopen \
        every_fault_while_an_open_writes_the_index_is_absorbed_or_reported_and_the_next_open_is_right 2>&1 |
        grep -E '^fault_injection:|^test |test result|panicked|seed' || return 1
}

run_disk_full() {
    say "real disk full"
    if [[ $(id -u) != 0 ]]; then
        echo "disk-full: skipped (needs root to mount a small file system)"
        return 0
    fi
    local bin mnt work
    bin=$(cairn_bin)
    mnt=$(mktemp -d)
    work=$(mktemp -d)
    dirs+=("$work" "$mnt")
    if ! mount -t tmpfs -o size=2m,mode=0700 cairn-full "$mnt" 2>/dev/null; then
        echo "disk-full: skipped (cannot mount a tmpfs here)"
        return 0
    fi
    mounts+=("$mnt")
    local store="$mnt/store" id status acked
    id=$("$bin" --store "$store" new --title 'disk full')
    # Leave ~300 KiB: the filler is what we free later.
    dd if=/dev/zero of="$mnt/filler" bs=64k count=27 status=none 2>/dev/null || true
    set +e
    yes "$LINE" | head -n 200000 | "$bin" --store "$store" append "$id" --durability sync \
        >"$work/acks" 2>"$work/err"
    status=${PIPESTATUS[2]}
    set -e
    acked=$(grep -c '' "$work/acks" || true)
    echo "disk-full: cairn append exited $status after $acked acknowledged records: $(head -c 300 "$work/err")"
    if [[ $status == 0 ]]; then
        echo "disk-full: FAILED: the disk never filled up" >&2
        return 1
    fi
    if ! grep -qi 'no space' "$work/err"; then
        echo "disk-full: FAILED: the error does not say the disk is full" >&2
        return 1
    fi
    if ! grep -q "$id" "$work/err"; then
        echo "disk-full: FAILED: the error does not name the session file" >&2
        return 1
    fi
    local checked
    checked=$(check_acks "$work/acks" "$store/sessions/$id.jsonl") || {
        echo "disk-full: FAILED: an acknowledged record is missing" >&2
        return 1
    }
    # Free the space; the session opens (a torn tail, if any, is cut) and takes appends.
    rm -f "$mnt/filler"
    "$bin" --store "$store" append "$id" </dev/null >/dev/null
    "$bin" --store "$store" fsck "$id" >"$work/fsck" || {
        cat "$work/fsck"
        echo "disk-full: FAILED: fsck after freeing space" >&2
        return 1
    }
    echo "$LINE" | "$bin" --store "$store" append "$id" >"$work/more"
    "$bin" --store "$store" show "$id" >/dev/null
    checked=$(check_acks "$work/acks" "$store/sessions/$id.jsonl")
    echo "disk-full: ENOSPC reported naming the file; $checked acknowledged records verified, 0 lost; reopened, fsck clean, appended again"
}

run_kill_torture() {
    local trials=20 mode=mixed
    while [[ $# -gt 0 ]]; do
        case $1 in
        --trials) trials=$2; shift 2 ;;
        --durability) mode=$2; shift 2 ;;
        *) echo "kill-torture: unknown argument $1" >&2; return 2 ;;
        esac
    done
    say "kill torture ($trials trials, durability $mode)"
    local bin work store
    bin=$(cairn_bin)
    work=$(mktemp -d)
    dirs+=("$work")
    store="$work/store"
    # Up to 10 trials per session: each trial reopens what the last kill left
    # (cutting a torn tail), and the session stays small enough to check.
    local per_session=10
    local t kills=0 total=0 sessions=0 torn=0 d pid id="" file n
    for ((t = 1; t <= trials; t++)); do
        if (((t - 1) % per_session == 0)); then
            if [[ -n $id ]]; then
                finish_kill_session "$bin" "$store" "$id" "$work" || return 1
                torn=$((torn + $(find "$store/sessions" -name "$id.jsonl.torn-*" | wc -l)))
                total=$((total + $(check_acks "$work/all-acks" "$file")))
                rm -rf "$store"
            fi
            id=$("$bin" --store "$store" new --title 'kill torture')
            file="$store/sessions/$id.jsonl"
            sessions=$((sessions + 1))
            : >"$work/all-acks"
        fi
        case $mode in
        mixed) d=$(printf 'sync\ngroup\nbuffered\n' | sed -n "$((RANDOM % 3 + 1))p") ;;
        *) d=$mode ;;
        esac
        yes "$LINE" | "$bin" --store "$store" append "$id" --durability "$d" >"$work/acks" 2>"$work/err" &
        pid=$!
        sleep "$(printf '0.%03d' $((RANDOM % 400 + 1)))"
        # $! is the last process of the pipeline: cairn itself.
        kill -9 "$pid" 2>/dev/null && kills=$((kills + 1)) || true
        wait "$pid" 2>/dev/null || true
        cat "$work/acks" >>"$work/all-acks"
        # Every record acknowledged in this session so far is still there.
        n=$(check_acks "$work/all-acks" "$file") || {
            echo "kill-torture: FAILED in trial $t ($d): an acknowledged record is missing" >&2
            return 1
        }
    done
    finish_kill_session "$bin" "$store" "$id" "$work" || return 1
    torn=$((torn + $(find "$store/sessions" -name "$id.jsonl.torn-*" | wc -l)))
    total=$((total + $(check_acks "$work/all-acks" "$file")))
    echo "kill-torture: kills: $kills in $trials trials over $sessions sessions; acknowledged records verified: $total, lost 0; torn tails cut and saved: $torn; fsck clean"
}

# A last writer open cuts any torn tail; the session is then clean.
finish_kill_session() {
    local bin=$1 store=$2 id=$3 work=$4
    "$bin" --store "$store" append "$id" </dev/null >/dev/null
    "$bin" --store "$store" fsck "$id" >"$work/fsck" || {
        cat "$work/fsck"
        echo "kill-torture: FAILED: fsck after the last kill of session $id" >&2
        return 1
    }
}

run_fuzz_smoke() {
    local seconds=20
    while [[ $# -gt 0 ]]; do
        case $1 in
        --seconds) seconds=$2; shift 2 ;;
        *) echo "fuzz-smoke: unknown argument $1" >&2; return 2 ;;
        esac
    done
    say "fuzz smoke ($seconds s per target)"
    if ! rustup toolchain list 2>/dev/null | grep -q nightly; then
        echo "fuzz-smoke: skipped (no nightly toolchain)"
        return 0
    fi
    command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
    if ! compgen -G "fuzz/corpus/open_session/seed-*" >/dev/null; then
        CAIRN_FUZZ_CORPUS="$root/fuzz/corpus" cargo test -p cairn --test fuzz_seeds -- --ignored >/dev/null
    fi
    # Reuse the instrumented build across runs on the same machine (it takes
    # minutes from scratch); CAIRN_FUZZ_TARGET overrides the directory.
    export CARGO_TARGET_DIR="${CAIRN_FUZZ_TARGET:-${HOME:-/tmp}/.cache/cairn/fuzz-target}"
    local target total=0 execs
    (cd fuzz && cargo +nightly fuzz build)
    for target in decode_line open_session projection append_input; do
        mkdir -p "fuzz/corpus/$target"
        (cd fuzz && cargo +nightly fuzz run "$target" "corpus/$target" -- \
            -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -max_len=65536 -print_final_stats=1) \
            >"fuzz/$target.log" 2>&1 || {
            tail -40 "fuzz/$target.log"
            echo "fuzz-smoke: FAILED: $target (see fuzz/artifacts/$target)" >&2
            return 1
        }
        execs=$(grep -E '^stat::number_of_executed_units' "fuzz/$target.log" | awk '{print $2}')
        echo "fuzz-smoke: $target: ${execs:-0} executions in $seconds s, no crash"
        total=$((total + ${execs:-0}))
        rm -f "fuzz/$target.log"
    done
    echo "fuzz-smoke: fuzz executions: $total (4 targets), no crash, no leak, no timeout"
}

run_long() {
    say "long release check"
    CAIRN_CRASH_POINTS=100000 cargo test --release -p cairn --test sim_crash -- --nocapture --exact \
        acknowledged_records_survive_thousands_of_simulated_power_losses 2>&1 | grep -E '^sim_crash:|test result|panicked|seed'
    CAIRN_FAULT_POINTS=20000 cargo test --release -p cairn --test fault_injection -- --nocapture --exact \
        every_injected_fault_is_reported_poisons_and_loses_nothing_acknowledged 2>&1 | grep -E '^fault_injection:|test result|panicked|seed'
    CAIRN_BIG_LINE_MB=100 cargo test --release -p cairn --test bad_input -- --nocapture --exact \
        a_huge_record_round_trips_and_a_huge_torn_line_is_cut_and_saved 2>&1 | grep -E '^bad_input:|test result|panicked'
    run_disk_full
    run_kill_torture --trials "${CAIRN_LONG_KILLS:-1000}"
    run_fuzz_smoke --seconds "${CAIRN_LONG_FUZZ_SECONDS:-600}"
}

cmd=${1:-ci}
[[ $# -gt 0 ]] && shift
case $cmd in
sim) run_sim ;;
faults) run_faults ;;
disk-full) run_disk_full ;;
kill-torture) run_kill_torture "$@" ;;
fuzz-smoke) run_fuzz_smoke "$@" ;;
long) run_long ;;
ci)
    run_sim
    run_faults
    run_disk_full
    run_kill_torture --trials 20
    run_fuzz_smoke --seconds 20
    ;;
*)
    sed -n '2,18p' "$0"
    exit 2
    ;;
esac
