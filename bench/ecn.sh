#!/usr/bin/env bash
# bench/ecn.sh: goroce's congestion control (ECN, CNPs, DCQCN; issue 16)
# measured on a real bottleneck: N senders run `roce perf write` through a
# Linux router whose egress is shaped by htb, with a 64 B latency probe
# beside them, with DCQCN off and on in the same run; prints the table of
# BENCHMARKS.md and draws each flow's rate and the probe's latency (SVG).
#
# Usage, as root, from anywhere in the repository:
#
#   bench/ecn.sh                  # 2 and 4 senders, off, on and on's floor, 20 s each: about 5 minutes
#   bench/ecn.sh -u               # ... and writes the table into BENCHMARKS.md, the picture to bench/ecn.svg
#   bench/ecn.sh -q               # quick: 2 senders at 200 Mbit/s, 4 s each (what TestECNScript runs)
#   bench/ecn.sh -r 300 -t 30 -n "2 4" -c 2 -o DIR    # rate (Mbit/s), seconds, senders, rounds, output
#   bench/ecn.sh -s "rp rpg_hai_rate 10" -s "np min_time_between_cnps 50"   # DCQCN settings on top
#   bench/ecn.sh -p DIR -u        # no run: the table and picture of a saved output DIR
#   bench/ecn.sh -x -n 4 -t 12    # and capture the first flow's packets at a1 and b1 (tcpdump, headers)
#   bench/ecn.sh -m on -b OLD/roce -n 4   # DCQCN on only, with another build of roce (paired runs)
#   bench/ecn.sh -k 90            # mark CE beyond 90% of the rate (default 98)
#   bench/ecn.sh -P pin           # CPUs: receivers first (nice, the default), pin (a half each), share
#
# Each DCQCN-on run has a floor run beside it: the same flows, DCQCN on,
# but the probe in a queue of its own at the router (its packets steered
# to an htb class of their own): the probe's latency from the machine's
# load alone, with no queue of the flows to wait behind.
#
# Needs ip, tc and nft (Debian: iproute2, nftables). The namespaces it
# makes are named goroce-ecn-PID-*, and are deleted when it exits.
set -euo pipefail

usage() { sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }

rate=500 secs=20 senders="2 4" rounds=1 out= update= quick= reuse= capture= modes="off on floor" bin= settings=()
mark=98 cpumode=nice
while getopts r:t:n:c:o:p:s:m:b:k:P:uqxh opt; do
	case $opt in
	k) mark=$OPTARG ;;
	P) cpumode=$OPTARG ;;
	s) settings+=("$OPTARG") ;;
	r) rate=$OPTARG ;;
	t) secs=$OPTARG ;;
	n) senders=$OPTARG ;;
	c) rounds=$OPTARG ;;
	o) out=$OPTARG ;;
	p) reuse=$OPTARG ;;
	u) update=1 ;;
	q) quick=1 ;;
	x) capture=1 ;;
	m) modes=$OPTARG ;;
	b) bin=$OPTARG ;;
	*) usage ;;
	esac
done
shift $((OPTIND - 1))
[ $# -eq 0 ] || usage
if [ -n "$quick" ]; then
	rate=200 secs=4 senders=2 rounds=1
fi
for v in "$rate" "$secs" "$rounds"; do
	[[ $v =~ ^[1-9][0-9]*$ ]] || { echo "bench/ecn.sh: -r, -t and -c take positive integers, not \"$v\"" >&2; exit 2; }
done
[[ $mark =~ ^[0-9]+$ ]] && ((mark >= 90 && mark <= 100)) || { echo "bench/ecn.sh: -k \"$mark\": the marking rate is 90 to 100 (percent of -r)" >&2; exit 2; }
[[ $cpumode =~ ^(nice|pin|share)$ ]] || { echo "bench/ecn.sh: -P \"$cpumode\": the CPU modes are nice, pin and share" >&2; exit 2; }
((secs >= 4)) || { echo "bench/ecn.sh: -t $secs: at least 4 seconds (perftest measures the middle half)" >&2; exit 2; }
for m in $modes; do
	[[ $m =~ ^(off|on|floor)$ ]] || { echo "bench/ecn.sh: -m \"$modes\": modes are off, on and floor" >&2; exit 2; }
done
[ -z "$bin" ] || [ -x "$bin" ] || { echo "bench/ecn.sh: -b $bin: not an executable" >&2; exit 2; }
for n in $senders; do
	[[ $n =~ ^[1-9]$ ]] || { echo "bench/ecn.sh: -n \"$senders\": sender counts are 1 to 9" >&2; exit 2; }
done

cd "$(dirname "$0")/.."
[ -f go.mod ] && [ -d bench ] || { echo "bench/ecn.sh: cannot find the repository root" >&2; exit 1; }

report() {
	local args=(-dir "$1")
	[ -n "$update" ] && args+=(-update BENCHMARKS.md -svg bench/ecn.svg)
	go run ./bench/cmd/ecnplot "${args[@]}"
}
if [ -n "$reuse" ]; then
	report "$reuse"
	exit
fi

[ "$(id -u)" -eq 0 ] || { echo "bench/ecn.sh: run as root (it makes network namespaces)" >&2; exit 1; }
for c in ip tc nft; do
	command -v $c >/dev/null || { echo "bench/ecn.sh: $c not found (Debian: apt-get install iproute2 nftables)" >&2; exit 1; }
done

out=${out:-$(mktemp -d -t goroce-ecn.XXXXXX)}
mkdir -p "$out"
work=$(mktemp -d -t goroce-ecn-work.XXXXXX)
pfx=goroce-ecn-$$ # namespace names; the veths' temporary names start with "ge$$"
roce=$work/roce rundir=$work/run
pids=()

cleanup() {
	local p ns
	touch "$work/stop" 2>/dev/null || true
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	for ns in $(ip netns list | awk '{print $1}' | grep "^$pfx-" || true); do
		ip netns del "$ns" 2>/dev/null || true
	done
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "bench/ecn.sh: building roce; output in $out" >&2
if [ -n "$bin" ]; then
	cp "$bin" "$roce"
else
	go build -o "$roce" ./cmd/roce
fi
go build -o "$work/qdiscstat" ./bench/cmd/qdiscstat
nsx() { local ns=$1; shift; ip netns exec "$pfx-$ns" "$@"; }
# Senders and receivers are separate hosts in a fabric, and a goroce
# device's notification point is its process, not a NIC. Sharing two CPUs
# as equals (-P share), a receiver woken by a CE-marked packet waited
# behind the senders' busy polls (perftest's) for 1.4-2.0 ms at the median
# and 24-55 ms at p99 before its CNP left, long enough for DCQCN to
# recover to the line rate and overflow the queue (4 senders, 3 paired
# 12 s runs, marks beyond 90%: steady-state drops 260, 395 and 287). So by
# default the receivers (b*) run at a higher priority (nice -10): the CPU
# is theirs when a packet arrives, as a NIC's is, and the senders' pacers
# use what is left (4 senders, marks beyond 98%, eight 8-12 s runs:
# steady-state drops 0 in every one).
# Pinning the senders (a*, the probe's client too) to the first half of
# the CPUs and the receivers to the rest (-P pin) also stopped the drops
# (0, 0, 0) but starved the senders' pacers: 3 busy-polling processes on
# one CPU each ran a third of the time, and a QP paced to 240 Mbit/s with
# no CE mark at all sent 101 (2 senders, one run).
ncpu=$(nproc)
cpus() {
	local ns=$1 h=$((ncpu / 2))
	if [ "$cpumode" != pin ] || ((ncpu < 2)); then return; fi
	case $ns in
	a*) echo "0-$((h - 1))" ;;
	b*) echo "$h-$((ncpu - 1))" ;;
	esac
}
r() {
	local ns=$1 c pin=()
	shift
	c=$(cpus "$ns")
	[ -z "$c" ] || pin=(taskset -c "$c")
	if [ "$cpumode" = nice ] && [[ $ns == b* ]]; then pin=(nice -n -10); fi
	ip netns exec "$pfx-$ns" "${pin[@]}" "$roce" --rundir "$rundir" "$@"
}

# The topology. Senders a1..a9 and the probe's ap, each on a subnet of its
# own toward the router r; r routes them onto 198.19.0.0/24 through one
# veth, b, whose egress is the bottleneck. Behind b, the namespace s is a
# switch (a bridge) to the receivers b1..b9 and bp: a goroce device holds
# RoCE v2's UDP port 4791 in its namespace, so one receiving device is one
# namespace, and every flow still crosses r's one queue.
maxn=0
for n in $senders; do ((n > maxn)) && maxn=$n; done
hosts=(p)
for ((i = 1; i <= maxn; i++)); do hosts+=("$i"); done
ip netns add "$pfx-r"
ip netns add "$pfx-s"
nsx r ip link set lo up
nsx r sysctl -qw net.ipv4.ip_forward=1
nsx s ip link add br0 type bridge
nsx s ip link set br0 up
ip link add "ge$$rb" type veth peer name "ge$$sr"
ip link set "ge$$rb" netns "$pfx-r"
ip link set "ge$$sr" netns "$pfx-s"
nsx r ip link set "ge$$rb" name b mtu 9000 up
nsx r ip addr add 198.19.0.1/24 dev b
nsx s ip link set "ge$$sr" name r mtu 9000 master br0 up
addr() { if [ "$1" = p ]; then echo 100; else echo "$1"; fi; }
for h in "${hosts[@]}"; do
	n=$(addr "$h")
	ip netns add "$pfx-a$h"
	ip netns add "$pfx-b$h"
	ip link add "ge$$a$h" type veth peer name "ge$$ra$h"
	ip link set "ge$$a$h" netns "$pfx-a$h"
	ip link set "ge$$ra$h" netns "$pfx-r"
	nsx "a$h" ip link set lo up
	nsx "a$h" ip link set "ge$$a$h" name eth0 mtu 9000 up
	nsx "a$h" ip addr add "198.18.$n.2/24" dev eth0
	nsx "a$h" ip route add default via "198.18.$n.1"
	# UDP GSO superpackets would cross the veth and the router whole, and
	# the bottleneck's queue would count a 60 KB superpacket as one packet;
	# a NIC segments before the wire: so does the sender's veth here.
	nsx "a$h" ip link set eth0 gso_max_segs 1
	nsx r ip link set "ge$$ra$h" name "a$h" mtu 9000 up
	nsx r ip addr add "198.18.$n.1/24" dev "a$h"
	ip link add "ge$$b$h" type veth peer name "ge$$sb$h"
	ip link set "ge$$b$h" netns "$pfx-b$h"
	ip link set "ge$$sb$h" netns "$pfx-s"
	nsx "b$h" ip link set lo up
	nsx "b$h" ip link set "ge$$b$h" name eth0 mtu 9000 up
	nsx "b$h" ip addr add "198.19.0.$((10 + n))/24" dev eth0
	nsx "b$h" ip route add default via 198.19.0.1
	nsx s ip link set "ge$$sb$h" name "b$h" mtu 9000 master br0 up
	r "a$h" link add "rxea$h" type rxe netdev eth0 roce-versions v2
	r "b$h" link add "rxeb$h" type rxe netdev eth0 roce-versions v2
done

# The bottleneck: htb at $rate Mbit/s on r's b, leaf queue pfifo limit 200.
# htb's tokens are capped at its burst; when the softirq that dequeues runs
# late (a loaded 2-core VM), a small burst loses rate: tc's default burst
# (about 1 ms) gave 240-290 Mbit/s out of a 500 Mbit/s class here. The
# burst is 16 ms of the rate.
nsx r tc qdisc add dev b root handle 1: htb default 10 r2q 1000
nsx r tc class add dev b parent 1: classid 1:10 htb rate "${rate}mbit" ceil "${rate}mbit" \
	burst $((rate * 2000)) cburst $((rate * 2000))
nsx r tc qdisc add dev b parent 1:10 handle 10: pfifo limit 200
# The floor runs' queue for the probe alone (class 1:20, steered there by
# a filter only during those runs): the same rate and queue, none of the
# flows' packets in it.
nsx r tc class add dev b parent 1: classid 1:20 htb rate "${rate}mbit" ceil "${rate}mbit" \
	burst $((rate * 2000)) cburst $((rate * 2000))
nsx r tc qdisc add dev b parent 1:20 handle 20: pfifo limit 200
# floor on|off: the probe's packets (to bp, 198.19.0.110) in 1:20, or in
# the flows' 1:10 with everything else.
floor() {
	if [ "$1" = on ]; then
		nsx r tc filter add dev b parent 1: protocol ip prio 1 u32 match ip dst 198.19.0.110/32 flowid 1:20
	else
		nsx r tc filter del dev b parent 1: prio 1 2>/dev/null || true
	fi
}
# Flows in order, as a fabric keeps them. A veth hands a packet to the
# backlog of the CPU that transmitted it, and htb sends from a timer on
# whichever CPU it fires, so consecutive packets of one flow could reach
# the switch s on two CPUs and leave it swapped. Captures at a1 and b1
# showed a flow's packets leave in order and arrive with one three places
# early; the responder's sequence-error NAK then had the rest resent: every
# retry of the DCQCN-on runs was such a NAK (none a timeout), with no qdisc
# drop: 1,585-2,365 packets resent in 6 s (3 runs). RPS on the veths
# of s and of the receivers hashes a flow to one CPU, as a NIC's RSS and a
# switch's per-port queue do: none resent in 6 runs (2 so, 4 with RPS on
# every veth; on r's alone, still 557-1,520). It costs the probe a hop to
# another CPU: its p50 alone 39-49 us against 18-22.
rps=$(printf '%x' $(((1 << $(nproc)) - 1)))
for ns in $(ip netns list | awk '{print $1}' | grep "^$pfx-[sb]"); do
	for d in $(ip netns exec "$ns" ls /sys/class/net); do
		f=/sys/class/net/$d/queues/rx-0/rps_cpus
		[ "$d" = lo ] || ip netns exec "$ns" sh -c "[ ! -e $f ] || echo $rps > $f"
	done
done
# ECN marking: the kernel has no marking qdisc here (no red, codel, pie),
# so r's forward chain marks CE on ECN-capable packets toward b beyond
# $mark% of the htb rate. Marking by rate, not by queue, makes DCQCN
# settle under the marking rate: with the receivers answering promptly
# (pinned, above), 4 senders settled at 86-87% of the rate when marked
# beyond 90% (3 runs), 87-90% beyond 95%, 94% beyond 98% and 95% beyond
# 100% (one run each), the queue empty in all (issue 16 asks for marking
# at 90% or more of the rate). In packets: nft_limit's byte mode lets a whole second
# of the rate through before it limits (nft_limit_init: tokens_max =
# unit·(rate+burst)/rate), its packet mode only burst packets. A data
# packet on the wire is 4154 bytes (4096 payload, BTH, ICRC, UDP, IPv4,
# Ethernet).
pps=$((rate * 1000000 * mark / 100 / (4154 * 8)))
nsx r nft -f - <<EOF
table inet goroce_ecn {
	chain ce {
		type filter hook forward priority filter; policy accept;
		oifname "b" ip ecn { ect0, ect1 } limit rate over $pps/second burst 32 packets ip ecn set ce counter
		oifname "b" ip6 ecn { ect0, ect1 } limit rate over $pps/second burst 32 packets ip6 ecn set ce counter
	}
}
EOF

{
	echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
	echo "roce: ${bin:-built from this tree}"
	echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
	echo "kernel: $(uname -r)"
	echo "cpus: $(nproc)"
	echo "rate_mbit: $rate"
	echo "mark_pps: $pps"
	echo "mark_percent: $mark"
	case $cpumode in
	pin) echo "pinning: senders on CPUs $(cpus a1), receivers on $(cpus b1)" ;;
	nice) echo "pinning: all CPUs shared, the receivers at nice -10" ;;
	share) echo "pinning: all CPUs shared alike" ;;
	esac
	echo "seconds: $secs"
	echo "settings: ${settings[*]:-}"
	echo "load-before: $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$out/meta.txt"

# ecn MODE: DCQCN off or on on every device. On: both points, and
# rpg_max_rate at the bottleneck's rate: a hardware port's line rate,
# here every port as fast as the bottleneck (a goroce device has none of
# its own: 100 Gb/s).
ecn() {
	local v=0 h d s
	[ "$1" = on ] && v=1
	for h in "${hosts[@]}"; do
		for d in "rxea$h" "rxeb$h"; do
			"$roce" --rundir "$rundir" ecn -d "$d" np enable $v >/dev/null
			"$roce" --rundir "$rundir" ecn -d "$d" rp enable $v >/dev/null
			"$roce" --rundir "$rundir" ecn -d "$d" rp rpg_max_rate "$rate" >/dev/null
			for s in "${settings[@]}"; do
				# shellcheck disable=SC2086 # "POINT PARAM VALUE"
				"$roce" --rundir "$rundir" ecn -d "$d" $s >/dev/null
			done
		done
	done
}

# listening NS PORT: wait until a TCP socket listens on PORT in NS.
listening() {
	local i
	for ((i = 0; i < 600; i++)); do
		nsx "$1" ss -Hltn "sport = :$2" | grep -q LISTEN && return 0
		sleep 0.1
	done
	echo "bench/ecn.sh: nothing listens on port $2 in $pfx-$1" >&2
	return 1
}

# run DIR N: N flows (0: the probe alone) and the probe for secs seconds.
run() {
	local dir=$1 n=$2 i st sp q=() c=() s=()
	mkdir -p "$dir"
	for ((i = 1; i <= n; i++)); do
		r "b$i" perf write -d "rxeb$i" -D "$secs" >"$dir/srv$i.out" 2>&1 &
		s+=($!)
	done
	r bp perf send --lat -d rxebp -D "$secs" -s 64 >"$dir/probe-srv.out" 2>&1 &
	s+=($!)
	pids+=("${s[@]}")
	for ((i = 1; i <= n; i++)); do listening "b$i" 18515; done
	listening bp 18515
	# The bottleneck every 20 ms (its backlog is the queue's delay; one
	# process reading netlink: a shell loop forking tc managed one sample
	# in 650 ms on the loaded machine), the devices' counters every
	# second. (ip netns exec runs its command as a child: the samplers
	# end by themselves, when $stop appears or after the run's time.)
	local stop=$work/stop end=$((SECONDS + secs + 30))
	rm -f "$stop"
	nsx r "$work/qdiscstat" -dev b -parent 1:10 -every 20ms -stop "$stop" -max $((secs + 30))s >"$dir/qdisc.txt" &
	q+=($!)
	(while [ ! -e "$stop" ] && ((SECONDS < end)); do
		echo "t $(date +%s.%N)"
		"$roce" --rundir "$rundir" stat 2>/dev/null || true
		sleep 1
	done) >"$dir/stat.txt" &
	q+=($!)
	if [ -n "$capture" ] && ((n > 0)); then
		# Flow 1 on both ends' wires: CE-marked data in and CNPs out at
		# b1 (the notification point's delay), CNPs in and data out at
		# a1 (the reaction point's); 96 bytes of each packet.
		for h in a1 b1; do
			nsx $h tcpdump -i eth0 -s 96 -w "$dir/$h.pcap" -Q inout udp port 4791 2>/dev/null &
			q+=($!)
		done
		sleep 1
	fi
	pids+=("${q[@]}")
	# The marking rule's counter runs on: its value before the run.
	nsx r nft list chain inet goroce_ecn ce >"$dir/nft-before.txt"
	date +%s.%N >"$dir/start.txt"
	for ((i = 1; i <= n; i++)); do
		r "a$i" perf write -d "rxea$i" -D "$secs" "198.19.0.$((10 + i))" >"$dir/flow$i.out" 2>&1 &
		c+=($!)
	done
	r ap perf send --lat -d rxeap -D "$secs" -s 64 -U 198.19.0.110 >"$dir/probe.out" 2>&1 &
	c+=($!)
	pids+=("${c[@]}")
	st=0
	for i in "${c[@]}" "${s[@]}"; do wait "$i" || st=1; done
	touch "$stop"
	# (tcpdump is the child of its subshell: stop it, by its parent.)
	if [ -n "$capture" ]; then for i in "${q[@]}"; do pkill -INT -P "$i" tcpdump 2>/dev/null || true; done; fi
	for i in "${q[@]}"; do wait "$i" 2>/dev/null || true; done
	nsx r nft list chain inet goroce_ecn ce >"$dir/nft.txt"
	if ((st != 0)); then
		echo "bench/ecn.sh: a perf process failed in $dir:" >&2
		tail -n 3 "$dir"/*.out >&2
		return 1
	fi
}

ecn off
run "$out/idle" 0
for n in $senders; do
	for ((k = 1; k <= rounds; k++)); do
		for mode in $modes; do
			echo "bench/ecn.sh: $n senders, DCQCN $mode, round $k" >&2
			if [ $mode = floor ]; then
				ecn on
				floor on
				run "$out/n$n-$mode-$k" "$n"
				floor off
			else
				ecn $mode
				run "$out/n$n-$mode-$k" "$n"
			fi
		done
	done
done
echo "load-after: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/meta.txt"
report "$out"
echo "bench/ecn.sh: raw output in $out" >&2
