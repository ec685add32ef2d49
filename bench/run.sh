#!/usr/bin/env bash
# bench/run.sh: run goroce's benchmarks over veth between two network
# namespaces and print the table of BENCHMARKS.md (goroce beside the raw-UDP
# baselines and the floors of the same run, as ratios: the "× floor" column;
# the fairness under a hostile READ; the scale figures). Round trips that
# wait in PollWait are compared with the blocking floor
# (UDPRoundTrip64/netpoll+ack), the others with the busy-polled one.
#
# Usage, as root, from anywhere in the repository:
#
#   bench/run.sh                 # -count 3, every benchmark; prints the table
#   bench/run.sh -u              # ... and writes it into BENCHMARKS.md
#   bench/run.sh -c 5 -b 'RCWrite64K|UDPThroughput'   # other -count, -bench
#   bench/run.sh -r FILE -u      # no run: the table of a saved output
#
# The raw go test output is kept (its path is printed at the end; -o FILE
# chooses it). Takes about 2 minutes with -count 3.
set -euo pipefail

usage() { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }

count=3 bench=. update= out= reuse=
while getopts c:b:o:r:uh opt; do
	case $opt in
	c) count=$OPTARG ;;
	b) bench=$OPTARG ;;
	o) out=$OPTARG ;;
	r) reuse=$OPTARG ;;
	u) update=1 ;;
	*) usage ;;
	esac
done
shift $((OPTIND - 1))
[ $# -eq 0 ] || usage

cd "$(dirname "$0")/.."
[ -f go.mod ] && [ -d bench ] || { echo "bench/run.sh: cannot find the repository root" >&2; exit 1; }

table() {
	if [ -n "$update" ]; then
		go run ./bench/cmd/benchtable -update BENCHMARKS.md <"$1"
	else
		go run ./bench/cmd/benchtable <"$1"
	fi
}

if [ -n "$reuse" ]; then
	table "$reuse"
	exit
fi

if [ "$(id -u)" -ne 0 ]; then
	echo "bench/run.sh: run as root (the benchmarks make network namespaces and open AF_PACKET sockets)" >&2
	exit 1
fi

out=${out:-$(mktemp -t goroce-bench.XXXXXX.txt)}
dirty=
if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
	dirty=" (with uncommitted changes in the tree)"
fi
{
	echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$dirty"
	echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
	echo "go: $(go version | cut -d' ' -f3-)"
	echo "kernel: $(uname -r)"
	echo "cpus: $(nproc) ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'))"
	echo "command: go test -run '^\$' -bench '$bench' -count $count ./bench/"
	echo "load-before: $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min)"
} >"$out"

echo "bench/run.sh: go test -run '^\$' -bench '$bench' -count $count ./bench/ (output in $out)" >&2
status=0
go test -run '^$' -bench "$bench" -count "$count" -timeout 60m ./bench/ 2>&1 | tee -a "$out" || status=$?
echo "load-after: $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min)" >>"$out"
# The load lines are read as "key: value" lines, wherever they are.
echo >&2
table "$out"
echo "bench/run.sh: raw output in $out" >&2
exit $status
