#!/usr/bin/env bash
# bench/vm.sh: goroce next to Linux rxe (rdma_rxe), on the same lab VMs and link.
#
# Boots the interop lab (../shared/lab, see its README) or reuses it, with a
# static build of this tree's roce in both VMs under /opt/extra (lab/up's
# ROCE_LAB_EXTRA), then runs rdma-core's and perftest's tools over the
# kernel's rxe0 and roce's equivalents over a goroce device, alternately, vm2
# (client) to vm1 (server) over eth0 (192.0.2.12 -> .11; the TCP exchange of
# QP data over the management link), and prints a Markdown table: medians
# [ranges] and goroce/rxe ratios of paired rounds, for BENCHMARKS.md.
#
# Usage, as root, from anywhere in the repository:
#
#   bench/vm.sh                    # 3 rounds; the table on stdout, progress on stderr
#   bench/vm.sh -r 5 -j runs.json  # 5 rounds; every run also into runs.json
#   bench/vm.sh --quick            # 1 round, few iterations: does it all work?
#   bench/vm.sh -k v2,both         # goroce with each device kind, rows for both
#   bench/vm.sh -k v2,v2@GOROCE_ICRC=hash   # the same kind with and without a setting
#
# Options:
#   -r N          rounds (default 3); each round runs every test on rxe and on
#                 goroce, the order of the two alternating from round to round
#   -k KINDS      goroce device kinds, comma-separated: v2 (RoCE v2 only: sent
#                 through the kernel's UDP socket, with GSO; received, as root,
#                 with AF_PACKET), v2s (the same, received from the UDP socket
#                 with UDP GRO: rx-path socket, which the VMs' Linux 6.1 cannot
#                 give AF_PACKET), v2x (the same, received through an AF_XDP
#                 socket fed by an XDP program in virtio-net's driver mode:
#                 rx-path xdp) and/or both (v1+v2: AF_PACKET both ways, the
#                 v2 GID used); default v2, the faster in the VMs: in 6 paired
#                 rounds (-k v2,both, at 2d820e1) both's write_bw was
#                 0.51-0.90x v2's (median 0.67), its pingpong 0.97-1.43x
#                 v2's time (1.34), its send_lat 0.93-1.72x (1.17);
#                 KIND@VAR=VALUE[@VAR=VALUE...] is KIND again with that in
#                 its goroce commands' environment, on the same device: a
#                 control within the same rounds, e.g. -k v2x,v2x@GOROCE_ICRC=hash
#   -n PP,LAT,BW  iterations of the pingpong, send_lat and write_bw tests
#                 (default 1000,1000,300; --quick: 50,50,20)
#   -j FILE       also write every run and the summary as JSON to FILE
#   -l DIR        keep every run's output in DIR (default: a temporary
#                 directory, deleted at the end)
#   -b FILE       use this static roce binary instead of building one
#   -t SECONDS    limit of each command in a VM (default 300; --quick 120)
#   -p DIR        profile goroce: every goroce command runs with
#                 GOROCE_CPUPROFILE, and each run's CPU profiles land in DIR as
#                 TAG.server.prof and TAG.client.prof (TAG as the logs' names),
#                 beside DIR/roce, the binary to read them with:
#                 go tool pprof -top DIR/roce DIR/r1-goroce-v2-write_bw.client.prof
#   -M MTU        the lab link's MTU for the run: eth0 in both VMs, their taps
#                 and the bridge in the lab's namespace (default: as the lab has
#                 it, 1500), put back at the end; every tool's path MTU (-m)
#                 follows it as rxe's active_mtu does, the largest of 256 to
#                 4096 within MTU - 80: 1500 gives 1024, 3826 (rx-path xdp's
#                 most) 2048, 4176 and more 4096
#   -e VAR=VALUE  run goroce's commands with this in their environment (again
#                 for more), e.g. -e GODEBUG=gctrace=1 (its lines in the logs, -l)
#   -f            also run the floors under the three tests in each round:
#                 bench/cmd/udpfloor (static, beside roce in /opt/extra) does
#                 the copies, CRC-32s and ACKs that any RoCE v2 over the
#                 kernel's UDP must do, and nothing else: under write_bw the
#                 same 64 KiB messages as 1024-byte datagrams, 8 in flight;
#                 under pingpong and send_lat the same 64-byte round trips
#                 (-lat: a SEND and its ACK each way, each side busy-polling
#                 an AF_PACKET receive ring, as goroce's link; the ACK and
#                 the next SEND as one UDP GSO message); a second table
#                 puts rxe, the floor and goroce side by side (what the
#                 VMs allow a user-space stack at all)
#   -F FLAGS      more flags for the floors' clients (udpfloor), e.g.
#                 -F -gso=false (-lat: the ACK and the SEND as two
#                 datagrams) or -F -entersyscall (sends as ordinary Go
#                 system calls, which with one P let sysmon hand the P
#                 away mid-send)
#   -c            capture: tcpdump in both VMs around every send_lat run (rxe,
#                 goroce, the floor), and a third table: each side's
#                 turnaround (a message's arrival on its eth0 to its answer's
#                 departure) and the wire both ways, from bench/cmd/turnaround;
#                 the capture costs each packet a tap, so those rounds'
#                 send_lat figures are a little slower than without it
#   -T            the turnaround split: roce and the floor built with the
#                 goroce_turn tag (link/udp/turn_on.go), which print, every
#                 1,000 round trips and at the end, where each side's
#                 turnaround went: wake (the kernel's timestamp of a
#                 message's first frame in the receive ring to the program
#                 taking it), path (then to its answer's sendmmsg) and send
#                 (the sendmmsg call); a table of them for pingpong and
#                 send_lat, goroce and the floor (implies -f; with -b, build
#                 the binary with -tags goroce_turn; a run of fewer than 100
#                 round trips prints nothing)
#   -H            host CPU per message: every write_bw run (rxe, goroce, the
#                 floor) is made again with 5x the iterations, and what the
#                 longer run cost more, read on the host from each VM's QEMU
#                 threads (the vCPU's, the others': virtio and the tap) and
#                 /proc/stat, is divided by the messages it moved more: the
#                 CPU a 64 KiB message costs each part of the host, without
#                 either run's start and end; a table of it, and the host's
#                 busy share while the longer run moved them
#   --quick       -r 1 with few iterations (the Go test TestLabVMScript runs this)
#
# Every run's progress line and JSON also give what the host's CPUs did while
# the client ran: each VM's vCPU thread and its QEMU's other threads, and
# the host's busy share (of 100% per CPU).
#
# Each run's progress line names the counters of either side that say a
# packet went missing or came twice, those not 0 (completer_retry_err,
# duplicate_request, out_of_seq_request, ...; goroce's retrans_pkts and
# link drops too): goroce's from its commands (run with GOROCE_STATS),
# rxe's the change in rxe0's hw_counters over the run. -j's JSON has them
# as each run's counters; the whole lines are in the logs (-l) as
# TAG.server.stats and TAG.client.stats.
#
# The lab's lock (/run/roce-lab.lock, internal/lab's) is held for the whole
# run, so tests that use the lab wait. The VMs are left as the lab's README
# describes them: rdma_rxe loaded, rxe0 on eth0, no goroce device.
#
# Why the modules move: Linux 6.1's rdma_rxe binds UDP port 4791 (in every
# namespace) from the moment the module loads, not when rxe0 is added, so the
# goroce rounds delete rxe0 and unload rdma_rxe (the other RDMA modules hold no
# socket and stay), and the rxe rounds load it and add rxe0 again.
set -euo pipefail

usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 2; }

rounds=3 kinds=v2 iters= json= logdir= bin= limit= quick= profdir= genv=() floor= floorflags= capture= split= linkmtu= hostcpu=
while [ $# -gt 0 ]; do
	case $1 in -r | -k | -n | -j | -l | -b | -t | -p | -e | -F | -M) [ $# -ge 2 ] || { echo "bench/vm.sh: $1 needs a value (-h says which)" >&2; exit 2; } ;; esac
	case $1 in
	-r) rounds=$2; shift ;;
	-k) kinds=$2; shift ;;
	-n) iters=$2; shift ;;
	-j) json=$2; shift ;;
	-l) logdir=$2; shift ;;
	-b) bin=$2; shift ;;
	-t) limit=$2; shift ;;
	-p) profdir=$2; shift ;;
	-e) genv+=("$2"); shift ;;
	-f) floor=1 ;;
	-c) capture=1 ;;
	-T) split=1 floor=1 ;;
	-H) hostcpu=1 ;;
	-F) floorflags=$2; shift ;;
	-M) linkmtu=$2; shift ;;
	--quick) quick=1 ;;
	-h | --help) usage ;;
	*) echo "bench/vm.sh: unknown argument '$1' (-h lists them)" >&2; exit 2 ;;
	esac
	shift
done
if [ -n "$quick" ]; then
	rounds=1 iters=${iters:-50,50,20} limit=${limit:-120}
fi
iters=${iters:-1000,1000,300} limit=${limit:-300}
IFS=, read -r pp_n lat_n bw_n <<<"$iters"
die() { echo "bench/vm.sh: $*" >&2; exit 1; }
bad() { echo "bench/vm.sh: $*" >&2; exit 2; } # a bad command line, as roce says it
isnum() { [[ $1 =~ ^[1-9][0-9]*$ ]]; }
isnum "$rounds" || bad "-r: a positive number of rounds, not '$rounds'"
isnum "$limit" || bad "-t: a positive number of seconds, not '$limit'"
isnum "${pp_n:-}" && isnum "${lat_n:-}" && isnum "${bw_n:-}" || bad "-n: three iteration counts PP,LAT,BW, not '$iters'"
[ "$bw_n" -ge 5 ] && [ "$lat_n" -ge 5 ] || bad "-n: perftest wants at least 5 iterations"
IFS=, read -r -a kind_list <<<"$kinds"
# ENV_WORD: what an -e or a kind's @VAR=VALUE may be (the commands go
# inside sh -c '...' in the VMs: no quote, no space).
ENV_WORD='^[A-Za-z_][A-Za-z0-9_]*=[A-Za-z0-9_.,:/=+-]*$'
for k in "${kind_list[@]}"; do
	case ${k%%@*} in v2 | v2s | v2x | both) ;; *) bad "-k: device kinds are v2, v2s, v2x and both, not '${k%%@*}'" ;; esac
	if [[ $k == *@* ]]; then
		IFS=@ read -r -a kenv <<<"${k#*@}"
		[ "${#kenv[@]}" -gt 0 ] || bad "-k $k: VAR=VALUE after @"
		for e in "${kenv[@]}"; do
			[[ $e =~ $ENV_WORD ]] || bad "-k $k: VAR=VALUE after each @, the value of letters, digits and _.,:/=+-, not '$e'"
		done
	fi
done
[ "${#kind_list[@]}" -gt 0 ] || bad "-k: at least one device kind"
pmtu=1024 # every tool's path MTU (-m): the lab's link MTU of 1500 less rxe's 80
if [ -n "$linkmtu" ]; then
	# 1280: the lab's link carries IPv6 too. 9000: jumbo frames.
	isnum "$linkmtu" && [ "$linkmtu" -ge 1280 ] && [ "$linkmtu" -le 9000 ] || bad "-M: a link MTU from 1280 to 9000, not '$linkmtu'"
	for k in "${kind_list[@]}"; do
		[ "${k%%@*}" != v2x ] || [ "$linkmtu" -le 3826 ] || bad "-M $linkmtu: rx-path xdp (-k v2x) takes a link MTU of at most 3826 (a frame and its headroom in a 4 KiB chunk)"
	done
	pmtu=256
	for m in 512 1024 2048 4096; do [ $((linkmtu - 80)) -ge "$m" ] && pmtu=$m; done
fi
for e in "${genv[@]}"; do
	[[ $e =~ $ENV_WORD ]] || bad "-e: VAR=VALUE, the value of letters, digits and _.,:/=+-, not '$e'"
done
if [ -n "$profdir" ]; then
	mkdir -p "$profdir" || bad "-p: cannot make the directory '$profdir'"
	profdir=$(cd "$profdir" && pwd)
fi
[ "$(id -u)" -eq 0 ] || die "run as root (the lab runs QEMU in a network namespace)"

REPO=$(cd "$(dirname "$0")/.." && pwd)
[ -f "$REPO/go.mod" ] || die "cannot find the repository root from $0"
LAB=${ROCE_LAB_DIR:-$(cd "$REPO/.." && pwd)/shared/lab}
[ -x "$LAB/up" ] && [ -x "$LAB/vm-exec" ] || die "no interop lab at $LAB (set ROCE_LAB_DIR)"
LOCK=/run/roce-lab.lock # internal/lab's, shared by every user of the lab
EXTRA=/opt/extra        # where lab/up puts ROCE_LAB_EXTRA's files
HASHFILE=.goroce-extra-sha256
VD=/tmp/goroce-vmbench # the script's directory in each VM (tmpfs)
RD=$VD/rundir          # the goroce device's runtime directory there
ROCE="$EXTRA/roce --rundir $RD"
PROF=$VD/roce.prof # -p: each goroce command's CPU profile, in its VM
STATS=$VD/stats    # each goroce command's port counters when it ends (GOROCE_STATS)
# RXE_SNAP: rxe0's counters now, a name and a value a line; RXE_DIFF:
# their change since $VD/hw0, as one `roce stat` line (link DEV/PORT, then
# names and values), which noted_counters reads for both stacks.
RXE_SNAP="(cd /sys/class/infiniband/rxe0/ports/1/hw_counters && grep -H . * | tr : ' ')"
RXE_DIFF="$RXE_SNAP > $VD/hw1; awk 'NR == FNR { a[\$1] = \$2; next } { o = o \" \" \$1 \" \" \$2 - a[\$1] } END { print \"link rxe0/1\" o }' $VD/hw0 $VD/hw1; rm -f $VD/hw0 $VD/hw1"
# GROCE: how a goroce test command starts (-e's environment, -p's profile).
genv_all=("${genv[@]}" "GOROCE_STATS=$STATS")
[ -z "$profdir" ] || genv_all+=("GOROCE_CPUPROFILE=$PROF")
GROCE_ENV="env ${genv_all[*]}"
GROCE="$GROCE_ENV $ROCE"
SERVER_MGMT=198.51.100.11 # vm1 on the management link: the TCP exchange goes there
ETH0=/sys/class/net/eth0/statistics
LABRUN=${ROCE_LAB_CACHE:-/var/cache/roce-lab}/run # the lab's pid files (vmN.pid)
HOSTCPUS=$(nproc)
TICK=$(getconf CLK_TCK)
HMUL=5 # -H: the longer write_bw run's iterations, in multiples of -n's

log() { printf '%s vm.sh: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

work=$(mktemp -d -t goroce-vmbench.XXXXXX)
if [ -z "$logdir" ]; then logdir=$work/logs; fi
mkdir -p "$logdir"
results=$work/results.tsv
: >"$results"
hostres=$work/hostcpu.tsv # -H: per round, stack and kind, the CPU a message cost
longres=$work/long.tsv    # -H: the longer write_bw runs
: >"$hostres"
: >"$longres"
touched= # set once the VMs' RDMA state may differ from the README's
mtu_before= # -M: the link's MTU before, once the script has changed it

# Every command that may outlive the script (lab/up's QEMU daemonizes) runs
# without fd 9, the lock: a child keeping it would hold the lab forever.
vmx() { "$LAB/vm-exec" "$@" 9>&-; }
vmx_t() { timeout "$1" "$LAB/vm-exec" "${@:2}" 9>&-; } # a VM that does not answer

cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	if [ -n "$touched" ]; then
		log "restoring the VMs: rdma_rxe loaded, rxe0 on eth0, no goroce device"
		for vm in vm1 vm2; do
			vm_to_rxe "$vm" >/dev/null || { log "$vm: could not restore rxe0 (see above)"; rc=1; }
		done
	fi
	if [ -n "$mtu_before" ]; then
		log "putting the lab link's MTU back to $mtu_before"
		set_link_mtu "$mtu_before" || { log "could not put the link's MTU back to $mtu_before"; rc=1; }
	fi
	if [ "$logdir" = "$work/logs" ] && [ "$rc" -ne 0 ] && [ -n "$(ls -A "$logdir")" ]; then
		logdir=$(mktemp -d -t goroce-vmbench-logs.XXXXXX) # kept: they say what failed
		cp -a "$work/logs/." "$logdir/"
	fi
	[ "$logdir" = "$work/logs" ] || log "the output of every run is in $logdir"
	rm -rf "$work"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- the build ----------------------------------------------------------------
commit=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)
if [ -n "$(git -C "$REPO" status --porcelain --untracked-files=no 2>/dev/null)" ]; then
	commit="$commit (with uncommitted changes)"
fi
mkdir -p "$work/extra"
if [ -n "$bin" ]; then
	cp "$bin" "$work/extra/roce" || die "-b $bin: cannot copy it"
	commit="$commit, binary $bin"
else
	log "building a static roce (CGO_ENABLED=0) of $REPO at $commit"
	(cd "$REPO" && CGO_ENABLED=0 go build ${split:+-tags goroce_turn} -o "$work/extra/roce" ./cmd/roce) 9>&- || die "go build failed"
fi
chmod 755 "$work/extra/roce"
if [ -n "$floor" ]; then
	(cd "$REPO" && CGO_ENABLED=0 go build ${split:+-tags goroce_turn} -o "$work/extra/udpfloor" ./bench/cmd/udpfloor) 9>&- || die "go build of bench/cmd/udpfloor failed"
	chmod 755 "$work/extra/udpfloor"
fi
[ -z "$profdir" ] || cp "$work/extra/roce" "$profdir/roce" # what pprof reads the profiles with
if [ -n "$capture" ]; then
	(cd "$REPO" && go build -o "$work/turnaround" ./bench/cmd/turnaround) 9>&- || die "go build of bench/cmd/turnaround failed"
fi
turns=$work/turns.tsv # -c: round, stack, kind, test, then turnaround's -tsv line
: >"$turns"
gover=$(cd "$REPO" && go env GOVERSION 2>/dev/null || echo "go unknown")

# hash_tree DIR: internal/lab's hashTree in shell, so that this script and
# lab.StartWithExtra reuse a lab the other booted with the same files: the
# SHA-256 of every regular file's path, mode and content, in path order.
hash_tree() {
	(cd "$1" && find . -type f -print0 | sed -z 's|^\./||' | LC_ALL=C sort -z |
		while IFS= read -r -d '' f; do
			printf '%s\0%s\0' "$f" "$(stat -c %A "$f")"
			cat "$f"
		done | sha256sum | cut -d' ' -f1)
}
sum=$(hash_tree "$work/extra")
mkdir -p "$work/stage"
cp -a "$work/extra/." "$work/stage/"
echo "$sum" >"$work/stage/$HASHFILE"

# --- the lab, locked ------------------------------------------------------------
exec 9>>"$LOCK"
waited=0
until flock -n 9; do
	if [ $((waited % 30)) -eq 0 ]; then log "waiting for the lab lock $LOCK (held by a test or another tool)"; fi
	[ "$waited" -lt "${ROCE_LAB_LOCK_WAIT:-1200}" ] || die "gave up waiting for $LOCK after $waited s"
	sleep 1
	waited=$((waited + 1))
done

lab_up() { vmx_t 30 vm1 true >/dev/null 2>&1 && vmx_t 30 vm2 true >/dev/null 2>&1; }
has_extra() {
	local vm got
	for vm in vm1 vm2; do
		got=$(vmx_t 30 "$vm" "cat $EXTRA/$HASHFILE" 2>/dev/null) || return 1
		[ "$(echo "$got" | tr -d '[:space:]')" = "$sum" ] || return 1
	done
}
# prepare_netns_dir: what internal/nettest.PrepareNetnsDir does before the
# lab's `ip netns add` (makes /run/netns a shared mount point of its own, as
# iproute2 would, under the same lock as the tests).
prepare_netns_dir() {
	mkdir -p /run/netns
	(
		flock 8
		mount --make-rshared /run/netns 2>/dev/null ||
			{ mount --bind /run/netns /run/netns && mount --make-rshared /run/netns; }
	) 8>/run/goroce-netns.lock
}
export ROCE_LAB_TRACES=$work/traces # lab scripts that capture write there, not into ../shared
if lab_up && has_extra; then
	log "the lab is up with this roce in $EXTRA: reusing it"
else
	if lab_up; then
		log "the lab is up without this roce: lab/down, then lab/up with ROCE_LAB_EXTRA"
		"$LAB/down" 9>&- >&2
	else
		log "the lab is down: lab/setup, then lab/up with ROCE_LAB_EXTRA"
		"$LAB/down" 9>&- >&2 || true # a half-up lab (one VM) goes first
		prepare_netns_dir || die "cannot make /run/netns a shared mount point"
		"$LAB/setup" 9>&- >&2 || die "lab/setup failed"
	fi
	ROCE_LAB_EXTRA=$work/stage "$LAB/up" 2 9>&- >&2 || die "lab/up failed"
	lab_up && has_extra || die "the lab came up without this roce in $EXTRA"
fi

# set_link_mtu MTU: the MTU of the lab's test link, end to end: the VMs'
# taps and the bridge in the lab's namespace, and eth0 in both VMs (rxe0
# follows its netdev's MTU; a goroce device reads it when it is added).
set_link_mtu() {
	local ns br vm
	read -r ns br < <(. "$LAB/common.sh" && echo "$NS $BR") && [ -n "$br" ] || return 1
	for vm in vm1 vm2; do ip netns exec "$ns" ip link set "tap-$vm" mtu "$1" || return 1; done
	ip netns exec "$ns" ip link set "$br" mtu "$1" || return 1
	for vm in vm1 vm2; do vmx "$vm" "ip link set eth0 mtu $1" || return 1; done
}
if [ -n "$linkmtu" ]; then
	m=$(vmx vm1 "cat /sys/class/net/eth0/mtu" | tr -d '[:space:]')
	[[ $m =~ ^[0-9]+$ ]] || die "cannot read vm1's eth0 MTU"
	if [ "$m" != "$linkmtu" ]; then
		mtu_before=$m
		set_link_mtu "$linkmtu" || die "-M $linkmtu: could not set the link's MTU"
	fi
	log "the lab link's MTU is $linkmtu, every tool's path MTU $pmtu"
fi

# --- switching a VM between rxe and goroce ----------------------------------------
# Scripts run with /bin/sh (dash) in the VMs. The test commands go inside
# sh -c '...' there, so they hold no single quote.

# kill_ours: the processes this script started in the VM (their pid files),
# if they still run the programs it started.
KILL_OURS="for f in $VD/*.pid; do [ -e \$f ] || continue; p=\$(cat \$f); \
grep -qaE 'roce|pingpong|ib_|udpfloor' /proc/\$p/cmdline 2>/dev/null && kill \$p; rm -f \$f; done"

# vm_to_goroce VM KIND: no rxe0, no rdma_rxe, UDP 4791 free, then a goroce
# device g0 on eth0 of KIND (v2, v2s, v2x or both) in $RD.
vm_to_goroce() {
	local opts="roce-versions $2"
	[ "$2" = v2s ] && opts="roce-versions v2 rx-path socket"
	[ "$2" = v2x ] && opts="roce-versions v2 rx-path xdp"
	vmx "$1" "mkdir -p $VD; $KILL_OURS
if rdma link show | grep -q '^link rxe0/'; then rdma link delete rxe0 || exit 1; fi
i=0
while grep -q '^rdma_rxe ' /proc/modules; do
  rmmod rdma_rxe 2>$VD/rmmod.err && break
  i=\$((i + 1)); if [ \$i -ge 100 ]; then echo rmmod rdma_rxe:; cat $VD/rmmod.err; lsmod; exit 1; fi
  sleep 0.2
done
if awk '\$2 ~ /:12B7\$/ { f = 1 } END { exit !f }' /proc/net/udp /proc/net/udp6; then
  echo UDP port 4791 is still bound without rdma_rxe:; ss -uanp; exit 1
fi
rm -rf $RD && $ROCE link add g0 type rxe netdev eth0 $opts"
}

# vm_to_rxe VM: no goroce device (nor anything of this script's), rdma_rxe loaded, rxe0 on eth0 with its
# IPv4 RoCE v2 GID (the README's state).
vm_to_rxe() {
	local ip4
	ip4=$(vm_gid4 "$1")
	vmx "$1" "mkdir -p $VD; $KILL_OURS
rm -rf $VD
grep -q '^rdma_rxe ' /proc/modules || modprobe rdma_rxe || exit 1
rdma link show | grep -q '^link rxe0/' || rdma link add rxe0 type rxe netdev eth0 || exit 1
i=0
until grep -qx $ip4 /sys/class/infiniband/rxe0/ports/1/gids/* 2>/dev/null; do
  i=\$((i + 1)); if [ \$i -ge 150 ]; then echo rxe0 has no GID $ip4:; rdma link show; exit 1; fi
  sleep 0.2
done"
}

# vm_gid4 VM: the VM's IPv4 address as a GID, the way sysfs writes it.
vm_gid4() {
	local n=${1#vm}
	printf '0000:0000:0000:0000:0000:ffff:c000:02%02x' $((10 + n))
}

# gid_index STACK VM: the index of the VM's IPv4 RoCE v2 GID (perftest's -x,
# pingpong's -g): from sysfs for rxe0, from roce gids for goroce's g0.
gid_index() {
	local out
	if [ "$1" = rxe ]; then
		# grep reads the table's 1,024 files at once: a shell loop would
		# fork a cat per entry, seconds under TCG.
		out=$(vmx "$2" "cd /sys/class/infiniband/rxe0/ports/1 && for f in \$(grep -lx $(vm_gid4 "$2") gids/*); do \
i=\${f#gids/}; [ \"\$(cat gid_attrs/types/\$i)\" = \"RoCE v2\" ] && echo \$i; done | sort -n")
	else
		out=$(vmx "$2" "$ROCE gids -d g0 2>/dev/null" | awk -v ip="192.0.2.$((10 + ${2#vm}))" '$5 == ip && $6 == "v2" { print $3 }')
	fi
	out=$(echo "$out" | head -1 | tr -d '[:space:]')
	[[ $out =~ ^[0-9]+$ ]] || { log "$2: no IPv4 RoCE v2 GID on $1's device"; return 1; }
	echo "$out"
}

# link_ok: vm2 reaches vm1 over the test link (eth0). vm2's virtio-net
# transmit queue was seen to hang under TCG (2026-12-06, in rxe's write_bw:
# its eth0 sent nothing more, its counters stuck, a ping neither left nor
# came back), and every run after it failed until the VMs were booted again.
link_ok() { vmx vm2 "ping -c 3 -W 1 192.0.2.11 >/dev/null 2>&1"; }

# revive: boot the lab again (lab/down, lab/up with this roce), then the
# link's MTU (-M) and the VMs' mode as they were.
revive() {
	local was=$mode
	"$LAB/down" 9>&- >&2 || true
	ROCE_LAB_EXTRA=$work/stage "$LAB/up" 2 9>&- >&2 && lab_up && has_extra || die "the lab did not come up again with this roce"
	[ -z "$linkmtu" ] || set_link_mtu "$linkmtu" || die "-M: cannot set the link's MTU $linkmtu again"
	mode=rxe # as lab/up leaves the VMs: rdma_rxe loaded, rxe0 on eth0
	[ -z "$was" ] || switch_to "$was"
}

mode= # rxe or the goroce kind the VMs are set up for
switch_to() {
	# Kinds that differ only in their @VAR=VALUE share the device.
	[ "${mode%%@*}" = "${1%%@*}" ] && { mode=$1; return 0; }
	touched=1
	local vm
	for vm in vm1 vm2; do
		if [ "$1" = rxe ]; then
			vm_to_rxe "$vm" >&2 || die "$vm: could not load rdma_rxe and add rxe0"
		else
			vm_to_goroce "$vm" "${1%%@*}" >&2 || die "$vm: could not free UDP 4791 and add the goroce device"
		fi
	done
	local stack=goroce
	[ "$1" = rxe ] && stack=rxe
	g1=$(gid_index $stack vm1) && g2=$(gid_index $stack vm2) || die "no GID to use"
	mode=$1
	log "VMs on $([ "$1" = rxe ] && echo "rxe (rdma_rxe, rxe0)" || echo "goroce (device g0, kind $1)"), GID index vm1 $g1, vm2 $g2"
}

# --- one test, one stack ------------------------------------------------------------
# cmdline STACK TEST GID [KIND]: the command, the server's without an
# address; a goroce KIND's @VAR=VALUE go into its environment.
cmdline() {
	local GROCE=$GROCE
	[[ ${4:-} == *@* ]] && { local ke=${4#*@}; GROCE="$GROCE_ENV ${ke//@/ } $ROCE"; }
	case $1/$2 in
	rxe/pingpong) echo "ibv_rc_pingpong -d rxe0 -g $3 -s 64 -n $pp_n" ;;
	rxe/send_lat) echo "ib_send_lat -d rxe0 -x $3 -s 64 -n $lat_n -m $pmtu -F" ;;
	rxe/write_bw) echo "ib_write_bw -d rxe0 -x $3 -s 65536 -n $bw_n -m $pmtu -F" ;;
	goroce/pingpong) echo "$GROCE pingpong -d g0 -g $3 -s 64 -n $pp_n" ;;
	goroce/send_lat) echo "$GROCE perf send --lat -d g0 -x $3 -s 64 -n $lat_n -m $pmtu -F" ;;
	goroce/write_bw) echo "$GROCE perf write -d g0 -x $3 -s 65536 -n $bw_n -m $pmtu -F" ;;
	# The floor's data goes to vm1's eth0 address (UDP 4792), its control
	# to the address the client is given, as perftest's exchange.
	floor/*) if [ "$3" = server ]; then echo "$EXTRA/udpfloor -s -a 192.0.2.11"; else
		case $2 in
		pingpong) echo "$EXTRA/udpfloor -a 192.0.2.11 -lat -size 64 -n $pp_n -m $pmtu${floorflags:+ $floorflags}" ;;
		send_lat) echo "$EXTRA/udpfloor -a 192.0.2.11 -lat -size 64 -n $lat_n -m $pmtu${floorflags:+ $floorflags}" ;;
		write_bw) echo "$EXTRA/udpfloor -a 192.0.2.11 -size 65536 -n $bw_n -m $pmtu -t 8${floorflags:+ $floorflags}" ;;
		esac
	fi ;;
	esac
}

# metric TEST < client output: the figure the table reports, from the
# output both tools print alike (rdma-core's pingpong line, perftest's tables).
metric() {
	case $1 in
	pingpong) awk '/ iters in .* usec\/iter/ { for (i = 1; i < NF; i++) if ($(i + 1) == "usec/iter") v = $i } END { if (v != "") print v }' ;;
	send_lat) awk '/t_typical/ { for (i = 1; i <= NF; i++) if ($i ~ /^t_typical/) c = i; next }
		c && $1 ~ /^[0-9]+$/ { print $c; exit }' ;;
	write_bw) awk '/BW average\[MB\/sec\]/ { h = 1; next } h && $1 ~ /^[0-9]+$/ { print $4; exit }' ;;
	esac
}

# SERVER_COUNTERS: what the server's VM received on eth0, dropped there, and
# what its UDP sockets dropped for want of buffer space (rxe's and goroce's
# v2 device's receive socket), one number a line.
SERVER_COUNTERS="{ cat $ETH0/rx_packets $ETH0/rx_dropped; \
awk '/^Udp:/ { if (!h) { for (i = 1; i <= NF; i++) if (\$i == \"RcvbufErrors\") c = i; h = 1 } else print \$c }' /proc/net/snmp; }"

# listening VM: 0 when something listens on TCP 18515 (the exchange port of
# pingpong and perftest), 1 when not, 2 when the server's log has ended.
LISTEN_PROBE="if ss -tln | grep -q ':18515 '; then echo listening; elif grep -q 'EXIT [0-9]*\$' $VD/s.log 2>/dev/null; then echo ended; else echo not; fi"

# capture_start: tcpdump on eth0 in both VMs (UDP only, headers and BTH),
# bounded by the run's limit; it reports whether both started.
capture_start() {
	local vm i
	for vm in vm1 vm2; do
		vmx "$vm" "mkdir -p $VD; rm -f $VD/cap.pcap; (timeout $limit tcpdump -i eth0 -s 96 -B 8192 -w $VD/cap.pcap udp > $VD/tcpdump.log 2>&1 & echo \$! > $VD/tcpdump.pidfile)" || return 1
	done
	for vm in vm1 vm2; do
		for i in $(seq 1 50); do
			vmx "$vm" "grep -q 'listening on' $VD/tcpdump.log 2>/dev/null" && break
			[ "$i" -eq 50 ] && { log "$vm: tcpdump did not start: $(vmx "$vm" "cat $VD/tcpdump.log" 2>&1)"; return 1; }
			sleep 0.2
		done
	done
}

# capture_end TAG ROUND STACK KIND TEST: stops both captures, copies them to
# the logs (TAG.vm1.pcap, TAG.vm2.pcap) and appends turnaround's line to
# $turns. tcpdump hands the packets it holds to its file when its buffer's
# timeout (1 s) expires, not when it is stopped: the last run's would be
# lost (it says "0 packets captured, 200 received by filter"). The pid's
# file is no *.pid, which KILL_OURS would take (its command line names
# $VD).
capture_end() {
	local vm
	sleep 1.5
	for vm in vm1 vm2; do
		vmx "$vm" "p=\$(cat $VD/tcpdump.pidfile 2>/dev/null) && kill -INT \$p 2>/dev/null; for i in \$(seq 1 50); do kill -0 \$p 2>/dev/null || break; sleep 0.1; done; cat $VD/tcpdump.log; rm -f $VD/tcpdump.pidfile" >>"$logdir/$1.client.log" 2>&1 || true
		vmx "$vm" "base64 $VD/cap.pcap; rm -f $VD/cap.pcap" | base64 -d >"$logdir/$1.$vm.pcap" 2>/dev/null || true
	done
	local port=4791 line
	[ "$3" = floor ] && port=4792
	if line=$("$work/turnaround" -tsv -port $port "192.0.2.11=$logdir/$1.vm1.pcap" "192.0.2.12=$logdir/$1.vm2.pcap" 2>>"$logdir/$1.client.log"); then
		printf '%s\t%s\t%s\t%s\t%s\n' "$2" "$3" "${4:--}" "$5" "$line" >>"$turns"
		log "round $2: $3${4:+ ($4)} $5 captured: turnaround vm1 $(cut -f1 <<<"$line") µs, vm2 $(cut -f2 <<<"$line") µs, the wire both ways $(cut -f3 <<<"$line") µs"
	else
		log "round $2: $3${4:+ ($4)} $5: no turnaround from the captures (see $logdir/$1.client.log)"
	fi
}

# host_ticks: the CPU time (clock ticks) of each VM's QEMU so far, its vCPU
# thread (under TCG with one vCPU, the thread besides the main one that
# has run the most) and its other threads (the main loop: virtio and the
# tap) apart, vm1's then vm2's, then the host's busy time over all its CPUs
# (/proc/stat's cpu line less idle and iowait): five numbers, NA for a VM
# whose QEMU cannot be read.
host_ticks() {
	local vm p
	for vm in vm1 vm2; do
		p=$(cat "$LABRUN/$vm.pid" 2>/dev/null) && [ -d "/proc/$p/task" ] || { printf 'NA NA '; continue; }
		awk -v main="$p" '{ sub(/^.*\) /, ""); t = $12 + $13; n = split(FILENAME, f, "/")
			if (f[n - 1] != main && t > v) v = t; all += t }
			END { if (NR) printf "%d %d ", v, all - v; else printf "NA NA " }' /proc/"$p"/task/*/stat 2>/dev/null || printf 'NA NA '
	done
	awk '$1 == "cpu" { print $2 + $3 + $4 + $7 + $8 + $9; exit }' /proc/stat
}

# host_used BEFORE AFTER: host_ticks' change as seconds, the same five
# (a field NA if either side is).
host_used() {
	awk -v a="$1" -v b="$2" -v tick="$TICK" 'BEGIN { n = split(a, x, " "); split(b, y, " ")
		for (i = 1; i <= 5; i++) printf "%s%s", (i > 1 ? " " : ""), (n == 5 && x[i] != "NA" && y[i] != "NA" ? sprintf("%.2f", (y[i] - x[i]) / tick) : "NA") }'
}

# run_one ROUND STACK KIND TEST [long]: server in vm1, client in vm2, both
# under timeout(1); appends a line to $results (long: -H's longer write_bw
# run, TAG-long in the logs, to $longres; the table and ratios do not see
# it). Leaves the run's figure and host_used's in last_run ("" if it failed).
run_one() {
	local round=$1 stack=$2 kind=$3 test=$4 long=${5:-}
	local tag=r$round-$stack${kind:+-$kind}-$test${long:+-long}
	local scmd ccmd t0 t1 h0= h1= out rc=0 st value i
	last_run=
	if [ "$stack" = floor ]; then
		scmd=$(cmdline floor "$test" server)
		ccmd="$(cmdline floor "$test" client) $SERVER_MGMT"
	else
		scmd=$(cmdline "$stack" "$test" "$g1" "$kind")
		ccmd="$(cmdline "$stack" "$test" "$g2" "$kind") $SERVER_MGMT"
	fi
	# A server of the last run still listening (it should not) would take the client.
	for i in $(seq 1 150); do
		[ "$(vmx vm1 "$LISTEN_PROBE")" != listening ] && break
		[ "$i" -eq 150 ] && { log "$tag: port 18515 in vm1 stays taken"; vmx vm1 "ss -tlnp" >&2; }
		sleep 0.2
	done
	local capturing=
	if [ -n "$capture" ] && [ "$test" = send_lat ]; then
		capture_start && capturing=1
	fi
	local hw0=
	[ "$stack" = rxe ] && hw0="$RXE_SNAP > $VD/hw0;"
	vmx vm1 "mkdir -p $VD; rm -f $VD/s.log; $hw0 $SERVER_COUNTERS > $VD/s.cnt; (timeout $limit sh -c 'echo \$\$ > $VD/s.pid; exec $scmd'; echo EXIT \$?; rm -f $VD/s.pid) > $VD/s.log 2>&1 &"
	st=not
	for i in $(seq 1 300); do
		st=$(vmx vm1 "$LISTEN_PROBE")
		[ "$st" = not ] || break
		sleep 0.2
	done
	if [ "$st" = listening ]; then
		# Where each VM's one vCPU went while the client ran (/proc/stat's
		# cpu line: user nice system idle iowait irq softirq steal), the
		# server's read from here around the client's command.
		local cpu_s0
		cpu_s0=$(vmx vm1 "head -1 /proc/stat" 2>/dev/null || true)
		h0=$(host_ticks)
		t0=$(date +%s.%N)
		# eth0's packet counters around the client: what each stack sent
		# and received for the same work (retransmissions, ACKs), eth1
		# carrying the exchange and vm-exec.
		out=$(vmx vm2 "mkdir -p $VD; $hw0 c0=\$(head -1 /proc/stat); p0=\$(cat $ETH0/tx_packets $ETH0/rx_packets)
timeout $limit sh -c 'echo \$\$ > $VD/c.pid; exec $ccmd' 2>&1; rc=\$?
echo PKTS \$p0 \$(cat $ETH0/tx_packets $ETH0/rx_packets); echo CPUC \$c0 \$(head -1 /proc/stat); rm -f $VD/c.pid; echo EXIT \$rc") || true
		t1=$(date +%s.%N)
		h1=$(host_ticks)
		printf '%s\n' "$out" >"$logdir/$tag.client.log"
		echo "CPUS $cpu_s0 $(vmx vm1 "head -1 /proc/stat" 2>/dev/null || true)" >>"$logdir/$tag.client.log"
		rc=$(printf '%s\n' "$out" | sed -n 's/.*EXIT \([0-9]*\)$/\1/p' | tail -1)
		rc=${rc:-255}
		# The server ends right after the client; give it the time a loaded VM takes.
		for i in $(seq 1 150); do
			[ "$(vmx vm1 "$LISTEN_PROBE")" = ended ] && break
			sleep 0.2
		done
	else
		log "$tag: the server did not listen on 18515"
		rc=255 t0=0 t1=0
	fi
	vmx vm1 "$KILL_OURS; echo SCNT \$(cat $VD/s.cnt) \$($SERVER_COUNTERS); cat $VD/s.log" >"$logdir/$tag.server.log" 2>&1 || true
	[ -z "$capturing" ] || capture_end "$tag" "$round" "$stack" "$kind" "$test"
	if [ -n "$profdir" ] && [ "$stack" = goroce ]; then
		# The profiles are written when the commands end: both have.
		local side vm
		for side in server client; do
			vm=vm1
			[ $side = client ] && vm=vm2
			vmx "$vm" "base64 $PROF 2>/dev/null; rm -f $PROF" | base64 -d >"$profdir/$tag.$side.prof" 2>/dev/null || true
			[ -s "$profdir/$tag.$side.prof" ] || { log "$tag: no CPU profile from $vm"; rm -f "$profdir/$tag.$side.prof"; }
		done
	fi
	# Each side's counters (goroce's GOROCE_STATS, rxe0's change over the
	# run): the ones that say where packets went missing or came twice.
	local gtext= gjson=null
	if [ "$stack" != floor ]; then
		local side vm get="cat $STATS 2>/dev/null; rm -f $STATS"
		[ "$stack" = rxe ] && get=$RXE_DIFF
		for side in server client; do
			vm=vm1
			[ $side = client ] && vm=vm2
			vmx "$vm" "$get" >"$logdir/$tag.$side.stats" 2>/dev/null || true
		done
		{ IFS= read -r gtext && IFS= read -r gjson; } < <(noted_counters "$logdir/$tag.server.stats" "$logdir/$tag.client.stats") || true
		gjson=${gjson:-null}
	fi
	local src
	src=$(sed -n 's/.*EXIT \([0-9]*\)$/\1/p' "$logdir/$tag.server.log" | tail -1)
	value=$(metric "$test" <"$logdir/$tag.client.log" 2>/dev/null || true)
	# perftest times with the CPU's cycle counter, whose rate it first
	# measures (get_clock.c); under a loaded TCG VM that measurement can
	# fail ("Correlation coefficient r^2 < 0.9"), and ib_write_bw then
	# printed 0.00 MB/s. Such a figure is no measurement: the run is made
	# again, once. A figure of 0 from any tool fails the run.
	local why=
	if grep -q 'Correlation coefficient r^2' "$logdir/$tag.client.log" 2>/dev/null; then
		why="the tool could not measure its CPU clock (Correlation coefficient r^2 < 0.9)"
	elif [[ $value =~ ^[0-9.]+$ ]] && ! awk -v v="$value" 'BEGIN { exit !(v > 0) }'; then
		why="a figure of 0"
	fi
	local secs pkts
	secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
	pkts=$(awk '$1 == "PKTS" && NF == 5 { printf "%d\t%d", $4 - $2, $5 - $3 }' "$logdir/$tag.client.log")
	pkts=${pkts:-$'NA\tNA'}
	# cpu_split TAG: user/system/softirq/idle % of the VM's vCPU (CPUC:
	# the client's, CPUS: the server's), from two cpu lines of /proc/stat.
	local cpu_split
	cpu_split=$(awk '($1 == "CPUC" || $1 == "CPUS") && NF == 23 && $2 == "cpu" && $13 == "cpu" {
		t = 0; for (i = 3; i <= 10; i++) { d[i] = $(i + 11) - $i; t += d[i] }
		if (t <= 0) next
		printf "%s%s us %d%% sy %d%% si %d%% idle %d%%", (n++ ? "; " : ""), ($1 == "CPUC" ? "client vm2" : "server vm1"),
			100 * (d[3] + d[4]) / t, 100 * d[5] / t, 100 * (d[8] + d[9]) / t, 100 * (d[6] + d[7]) / t }' "$logdir/$tag.client.log")
	local scnt
	scnt=$(awk '$1 == "SCNT" && NF == 7 { printf "%d\t%d\t%d", $5 - $2, $6 - $3, $7 - $4 }' "$logdir/$tag.server.log")
	scnt=${scnt:-$'NA\tNA\tNA'}
	# What the host's CPUs did while the client ran (host_ticks), in
	# seconds and as shares of the client's wall time.
	local hused wall htext
	hused=$(host_used "$h0" "$h1")
	wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
	htext=$(awk -v u="$hused" -v s="$wall" -v ncpu="$HOSTCPUS" 'BEGIN { split(u, x, " "); if (x[1] == "NA" || x[3] == "NA" || x[5] == "NA" || s <= 0) exit
		printf "vm1 vCPU %d%% other %d%%, vm2 vCPU %d%% other %d%%, all %d%% of %d%%", 100 * x[1] / s, 100 * x[2] / s, 100 * x[3] / s, 100 * x[4] / s, 100 * x[5] / s, 100 * ncpu }')
	if [ -z "${again:-}" ] && [[ $why == *"CPU clock"* ]]; then
		log "round $round: $stack${kind:+ ($kind)} $test: $why; running it again (logs $logdir/$tag.*.log)"
		mv "$logdir/$tag.client.log" "$logdir/$tag.clockfailed.client.log"
		mv "$logdir/$tag.server.log" "$logdir/$tag.clockfailed.server.log"
		again=1 run_one "$@"
		return
	fi
	# ok: both sides exited 0 with a figure, and nothing made it no measurement.
	local ok=
	[ "$rc" = 0 ] && [ "${src:-x}" = 0 ] && [[ $value =~ ^[0-9.]+$ ]] && [ -z "$why" ] && ok=1
	if [ -z "${again:-}" ] && [ -z "$ok" ] && ! link_ok; then
		log "round $round: $stack${kind:+ ($kind)} $test FAILED (client exit $rc, server exit ${src:-none}) and vm2 no longer reaches vm1 over eth0 (the VMs' virtio link hung): booting the lab again, then running it again (logs $logdir/$tag.linkdown.*.log)"
		mv "$logdir/$tag.client.log" "$logdir/$tag.linkdown.client.log"
		mv "$logdir/$tag.server.log" "$logdir/$tag.linkdown.server.log"
		revive
		again=1 run_one "$@"
		return
	fi
	if [ -n "$ok" ]; then
		log "round $round: $stack${kind:+ ($kind)} $test: $value $(unit "$test") (client $secs s, its eth0 tx/rx ${pkts/$'\t'//}; server eth0 rx/dropped/UDP RcvbufErrors ${scnt//$'\t'//}${cpu_split:+; vCPU $cpu_split}${htext:+; host: $htext}${gtext:+; counters: $gtext})"
	else
		log "round $round: $stack${kind:+ ($kind)} $test FAILED: client exit $rc, server exit ${src:-none}${why:+, $why}; logs $logdir/$tag.*.log"
		tail -n 5 "$logdir/$tag.client.log" "$logdir/$tag.server.log" >&2 || true
		# What the VMs' kernels said of their clocks: a figure of 0, and
		# perftest's failed clock measurement, are what a clock that jumped
		# would give (a TCG guest's TSC can be found unstable).
		local vm
		for vm in vm1 vm2; do
			echo "== $vm: dmesg, clocksource" >>"$logdir/$tag.client.log"
			vmx "$vm" "dmesg | grep -iE 'clocksource|tsc' | tail -n 8; cat /sys/devices/system/clocksource/clocksource0/current_clocksource" >>"$logdir/$tag.client.log" 2>&1 || true
		done
		value=NA
	fi
	[ "$value" = NA ] || last_run="$value $wall $hused"
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$stack" "${kind:--}" "$test" "$value" "$secs" "$pkts" "$scnt" "$gjson" "${hused// /$'\t'}" \
		>>"$([ -n "$long" ] && echo "$longres" || echo "$results")"
}

# write_bw_host ROUND STACK KIND: write_bw, and with -H the longer run after
# it; what the longer one cost more per message it moved more goes to
# $hostres (round, stack, kind; vm1's vCPU and other threads, vm2's, all
# of the host, ms; the host's busy share, %; both runs' MB/s).
write_bw_host() {
	run_one "$1" "$2" "$3" write_bw
	[ -n "$hostcpu" ] || return 0
	local short=$last_run
	if [ -z "$short" ]; then
		log "round $1: $2${3:+ ($3)} write_bw: no host CPU per message, no longer run (the run failed)"
		return 0
	fi
	bw_n=$((bw_n * HMUL)) run_one "$1" "$2" "$3" write_bw long
	local longer=$last_run
	if [ -z "$longer" ]; then
		log "round $1: $2${3:+ ($3)} write_bw: no host CPU per message (a run failed)"
		return 0
	fi
	local line
	line=$(awk -v a="$short" -v b="$longer" -v msgs=$((bw_n * (HMUL - 1))) 'BEGIN {
		split(a, x, " "); split(b, y, " ")
		for (i = 3; i <= 7; i++) if (x[i] == "NA" || y[i] == "NA") exit
		w = y[2] - x[2]; if (w <= 0) exit
		for (i = 3; i <= 7; i++) d[i] = 1000 * (y[i] - x[i]) / msgs
		printf "%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%.0f\t%s\t%s", d[3], d[4], d[5], d[6], d[7], 100 * (y[7] - x[7]) / w, y[1], x[1] }')
	if [ -z "$line" ]; then
		log "round $1: $2${3:+ ($3)} write_bw: no host CPU per message (the QEMUs' threads could not be read)"
		return 0
	fi
	printf '%s\t%s\t%s\t%s\n' "$1" "$2" "${3:--}" "$line" >>"$hostres"
	local v1 o1 v2 o2 all busy mbl mbs
	IFS=$'\t' read -r v1 o1 v2 o2 all busy mbl mbs <<<"$line"
	log "round $1: $2${3:+ ($3)} write_bw, host CPU per 64 KiB message (-n $((bw_n * HMUL)) less -n $bw_n): vm1 vCPU $v1 ms, other $o1; vm2 vCPU $v2 ms, other $o2; all $all ms; host busy $busy% while the longer run moved them ($mbl MB/s; the shorter $mbs)"
}

# NOTED: the counters that say a packet went missing or came twice (roce
# stat --help; rxe has all but the last three): the requester's
# retransmissions and their causes, the responder's sequence errors and
# duplicates, goroce's link's drops.
NOTED="retrans_pkts completer_retry_err retry_exceeded_err retry_rnr_exceeded_err rcvd_seq_err rcvd_rnr_err \
out_of_seq_request duplicate_request send_rnr_err rcvd_bad_icrc rx_drop_socket_full rx_drop_kernel_refused"

# noted_counters FILE...: the NOTED counters that are not 0 in
# GOROCE_STATS files or RXE_DIFF's output (one `roce stat` line each: link DEV/PORT, then names
# and values), by side (FILE's next-to-last suffix: TAG.server.stats):
# a line for the progress line, then a line of JSON.
noted_counters() {
	awk -v noted="$NOTED" '
	BEGIN { n = split(noted, a, " "); for (i = 1; i <= n; i++) want[a[i]] = 1
		for (i = 1; i < ARGC; i++) { s = ARGV[i]; sub(/\.stats$/, "", s); sub(/.*\./, "", s); order[++ns] = s; sideof[ARGV[i]] = s } }
	{ side = sideof[FILENAME] }
	$1 == "link" { seen[side] = 1; for (i = 3; i < NF; i += 2) if (($i in want) && $(i + 1) + 0 > 0) {
		t[side] = t[side] (t[side] == "" ? "" : ", ") $i " " $(i + 1)
		j[side] = j[side] (j[side] == "" ? "" : ",") "\"" $i "\":" $(i + 1) } }
	END {
		for (k = 1; k <= ns; k++) {
			s = order[k]
			text = text (k > 1 ? "; " : "") s " " (seen[s] ? (t[s] == "" ? "none" : t[s]) : "no counters read")
			json = json (k > 1 ? "," : "") "\"" s "\":" (seen[s] ? "{" j[s] "}" : "null")
		}
		print text
		print "{" json "}"
	}' "$@"
}
unit() {
	case $1 in pingpong) echo "usec/iter" ;; send_lat) echo "usec t_typical" ;; write_bw) echo "MB/s" ;; esac
}

# --- the rounds ----------------------------------------------------------------------
tests=(pingpong send_lat write_bw)
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
log "$rounds round(s); goroce device kind(s): ${kind_list[*]}; iterations: pingpong $pp_n, send_lat $lat_n, write_bw $bw_n; host load $load_before"
for r in $(seq 1 "$rounds"); do
	# rxe first in odd rounds, last in even ones (ABBA): a drift of the host's
	# load over the run weighs on both stacks alike, and the modules move once
	# per round.
	blocks=(rxe "${kind_list[@]}")
	if [ $((r % 2)) -eq 0 ]; then
		blocks=()
		for k in "${kind_list[@]}"; do blocks=("$k" "${blocks[@]}"); done
		blocks+=(rxe)
	fi
	for b in "${blocks[@]}"; do
		switch_to "$b"
		for t in "${tests[@]}"; do
			bstack=goroce bkind=$b
			[ "$b" = rxe ] && bstack=rxe bkind=
			if [ "$t" = write_bw ]; then write_bw_host "$r" "$bstack" "$bkind"; else run_one "$r" "$bstack" "$bkind" "$t"; fi
		done
		# The floors once a round, after the first goroce block's tests.
		if [ -n "$floor" ] && [ "$b" = "${kind_list[0]}" ]; then
			for t in "${tests[@]}"; do
				if [ "$t" = write_bw ]; then write_bw_host "$r" floor ""; else run_one "$r" floor "" "$t"; fi
			done
		fi
	done
done
switch_to rxe
touched=
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

# --- the table ------------------------------------------------------------------------
# AWK_MEDIAN: the awk functions the tables' programs share: an insertion
# sort, the median (which sorts the array in place) and range, "median
# [min–max]" of an array, each figure in printf format f ("—" when empty).
AWK_MEDIAN='
	function sortn(a, n,   i, j, t) { for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t } }
	function median(a, n) { sortn(a, n); return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
	function range(a, n, f) { return n ? sprintf(f " [" f "–" f "]", median(a, n), a[1], a[n]) : "—" }
'

summary() {
	awk -F'\t' -v kinds="${kind_list[*]}" -v rounds="$rounds" -v fmt="$1" \
		-v pp="$pp_n" -v lat="$lat_n" -v bw="$bw_n" -v per=$((65536 / pmtu)) "$AWK_MEDIAN"'
	function num(v, t) { return t == "write_bw" ? sprintf("%.2f", v) : (v >= 100 ? sprintf("%.0f", v) : sprintf("%.1f", v)) }
	function cell(t, a, n, failed,   s, lo, hi, m) {
		if (n == 0) return "— (" failed " failed)"
		m = median(a, n); lo = a[1]; hi = a[n]
		s = num(m, t) " [" num(lo, t) "–" num(hi, t) "]"
		if (failed) s = s " (" failed " of " n + failed " failed)"
		return s
	}
	{ v[$1, $2, $3, $4] = $5; tx[$1, $2, $3, $4] = $7 }
	# pkts STACK KIND TEST: the packets the client sent on eth0, median [range].
	function pkts(st, k, t,   r, n, P) {
		for (r = 1; r <= rounds; r++) if (tx[r, st, k, t] != "" && tx[r, st, k, t] != "NA") P[++n] = tx[r, st, k, t] + 0
		if (!n) return "—"
		m = median(P, n)
		return sprintf("%d [%d–%d]", m, P[1], P[n])
	}
	END {
		nk = split(kinds, K, " ")
		split("pingpong send_lat write_bw", T, " ")
		label["pingpong"] = "`ibv_rc_pingpong -s 64` / `roce pingpong -s 64` (-n " pp "), µs per iteration"
		label["send_lat"] = "`ib_send_lat -s 64` / `roce perf send --lat -s 64` (-n " lat "), t_typical µs"
		label["write_bw"] = "`ib_write_bw -s 65536` / `roce perf write -s 65536` (-n " bw "), BW average MB/s"
		short["pingpong"] = "pingpong"; short["send_lat"] = "send_lat"; short["write_bw"] = "write_bw"
		ideal["pingpong"] = 2 * pp; ideal["send_lat"] = 2 * lat; ideal["write_bw"] = per * bw
		goal["pingpong"] = "≤ 1.0×"; goal["send_lat"] = "≤ 1.0×"; goal["write_bw"] = "≥ 1.5×"
		sense["pingpong"] = "rxe'"'"'s time"; sense["send_lat"] = "rxe'"'"'s latency"; sense["write_bw"] = "rxe'"'"'s rate"
		if (fmt == "md") {
			print "| test (client vm2 → server vm1) | rxe | goroce | goroce/rxe, paired rounds | goal |"
			print "|---|---|---|---|---|"
		}
		for (ti = 1; ti <= 3; ti++) {
			t = T[ti]
			for (ki = 1; ki <= nk; ki++) {
				k = K[ki]
				nr = ng = nq = fr = fg = met = 0
				delete R; delete G; delete Q
				for (r = 1; r <= rounds; r++) {
					x = v[r, "rxe", "-", t]; y = v[r, "goroce", k, t]
					if (x != "" && x != "NA") R[++nr] = x + 0; else fr++
					if (y != "" && y != "NA") G[++ng] = y + 0; else fg++
					if (x != "" && x != "NA" && y != "" && y != "NA" && x + 0 > 0) {
						Q[++nq] = (y + 0) / (x + 0)
						if (t == "write_bw" ? Q[nq] >= 1.5 : Q[nq] <= 1.0) met++
					}
				}
				rc = cell(t, R, nr, fr); gc = cell(t, G, ng, fg)
				if (nq) { qm = median(Q, nq); qc = sprintf("%.2f× [%.2f–%.2f] %s", qm, Q[1], Q[nq], sense[t]) } else qc = "—"
				gl = goal[t] " (met in " met " of " nq ")"
				kl = nk > 1 || k != "v2" ? " (goroce " k ")" : ""
				if (fmt == "md") printf "| %s%s | %s | %s | %s | %s |\n", label[t], kl, rc, gc, qc, gl
				else if (fmt == "pkts") {
					if (ki == 1) printf "%s%s (least %d): rxe %s", (ti > 1 ? "; " : ""), short[t], ideal[t], pkts("rxe", "-", t)
					printf ", goroce%s %s", (nk > 1 ? " " k : ""), pkts("goroce", k, t)
				}
				else {
					printf "%s{\"test\":\"%s\",\"kind\":\"%s\",\"rxe_median\":%s,\"goroce_median\":%s,\"ratio_median\":%s,\"ratio_min\":%s,\"ratio_max\":%s,\"rounds_paired\":%d,\"goal_met\":%d}",
						sep, t, k, (nr ? median(R, nr) : "null"), (ng ? median(G, ng) : "null"), (nq ? sprintf("%.4f", qm) : "null"),
						(nq ? sprintf("%.4f", Q[1]) : "null"), (nq ? sprintf("%.4f", Q[nq]) : "null"), nq, met
					sep = ","
				}
			}
		}
	}' "$results"
}

# floor_summary FMT: rxe, the floor and goroce, paired by round, a row per
# test (and goroce kind).
floor_summary() {
	awk -F'\t' -v kinds="${kind_list[*]}" -v rounds="$rounds" -v fmt="$1" \
		-v pp="$pp_n" -v lat="$lat_n" -v bw="$bw_n" -v per=$((65536 / pmtu)) "$AWK_MEDIAN"'
	function ok(x) { return x != "" && x != "NA" && x + 0 > 0 }
	function col(a, n, f, x) { return n ? sprintf(f x " [" f "–" f "]", median(a, n), a[1], a[n]) : "—" }
	function jv(a, n) { return n ? sprintf("%.4f", median(a, n)) : "null" }
	{ v[$1, $2, $3, $4] = $5 }
	END {
		nk = split(kinds, K, " ")
		split("pingpong send_lat write_bw", T, " ")
		label["pingpong"] = "`pingpong` 64 B (-n " pp "), µs per iteration"
		label["send_lat"] = "`send_lat` 64 B (-n " lat "), t_typical µs"
		label["write_bw"] = "`write_bw` 64 KiB (-n " bw "), MB/s"
		if (fmt == "md") {
			print "| test | rxe | UDP floor | goroce | floor/rxe | goroce/floor |"
			print "|---|---|---|---|---|---|"
		}
		for (ti = 1; ti <= 3; ti++) {
			t = T[ti]
			f = t == "write_bw" ? "%.2f" : "%.1f"
			for (ki = 1; ki <= nk; ki++) {
				k = K[ki]
				nr = nf = ng = na = nb = 0
				delete R; delete F; delete G; delete A; delete B
				for (r = 1; r <= rounds; r++) {
					x = v[r, "rxe", "-", t]; y = v[r, "floor", "-", t]; z = v[r, "goroce", k, t]
					if (ok(x)) R[++nr] = x + 0
					if (ok(y)) F[++nf] = y + 0
					if (ok(z)) G[++ng] = z + 0
					if (ok(x) && ok(y)) A[++na] = y / x
					if (ok(y) && ok(z)) B[++nb] = z / y
				}
				if (fmt == "md")
					printf "| %s (goroce %s, %d round(s)) | %s | %s | %s | %s | %s |\n", label[t], k, rounds,
						col(R, nr, f, ""), col(F, nf, f, ""), col(G, ng, f, ""), col(A, na, "%.2f", "×"), col(B, nb, "%.2f", "×")
				else {
					printf "%s{\"test\":\"%s\",\"kind\":\"%s\",\"rxe_median\":%s,\"floor_median\":%s,\"goroce_median\":%s,\"floor_over_rxe_median\":%s,\"goroce_over_floor_median\":%s,\"rounds_paired\":%d}",
						sep, t, k, jv(R, nr), jv(F, nf), jv(G, ng), jv(A, na), jv(B, nb), (na < nb ? na : nb)
					sep = ","
				}
			}
		}
	}' "$results"
}

# host_summary FMT: -H's CPU per message, by stack (rxe, goroce's kinds,
# the floor): medians [range] over the rounds of each part of the host,
# and of the whole over rxe's whole in the same round.
host_summary() {
	awk -F'\t' -v kinds="${kind_list[*]}" -v fmt="$1" -v ncpu="$HOSTCPUS" -v n="$bw_n" -v hm="$HMUL" "$AWK_MEDIAN"'
	function jv(a, k) { return k ? sprintf("%.4f", median(a, k)) : "null" }
	{ key = $2 ($3 == "-" ? "" : " " $3); c = ++cnt[key]
	  for (i = 4; i <= 9; i++) V[key, i, c] = $i; V[key, 10, c] = $8 + 0; rnd[key, c] = $1
	  if ($2 == "rxe") rxe_all[$1] = $8 }
	END {
		nk = split(kinds, K, " ")
		order[1] = "rxe"; for (i = 1; i <= nk; i++) order[i + 1] = "goroce " K[i]; order[nk + 2] = "floor"
		if (fmt == "md") {
			print "| write_bw, host CPU per 64 KiB message (-H: -n " n * hm " less -n " n "), ms | vm1 (server) vCPU | vm2 (client) vCPU | QEMUs'"'"' other threads | all | all, × rxe'"'"'s | host busy, % of " 100 * ncpu " | rounds |"
			print "|---|---|---|---|---|---|---|---|"
		}
		for (o = 1; o <= nk + 2; o++) {
			key = order[o]; c = cnt[key]
			if (!c) continue
			nq = 0; delete Q
			for (j = 1; j <= c; j++) {
				a1[j] = V[key, 4, j]; a2[j] = V[key, 6, j]; a3[j] = V[key, 5, j] + V[key, 7, j]; a4[j] = V[key, 8, j]; a5[j] = V[key, 9, j]
				r = rnd[key, j]
				if ((r in rxe_all) && rxe_all[r] > 0) Q[++nq] = V[key, 8, j] / rxe_all[r]
			}
			if (fmt == "md")
				printf "| %s | %s | %s | %s | %s | %s | %s | %d |\n", key, range(a1, c, "%.2f"), range(a2, c, "%.2f"), range(a3, c, "%.2f"),
					range(a4, c, "%.2f"), (nq ? sprintf("%.2f× [%.2f–%.2f]", median(Q, nq), Q[1], Q[nq]) : "—"), range(a5, c, "%.0f"), c
			else {
				split(key, kk, " ")
				printf "%s{\"stack\":\"%s\",\"kind\":\"%s\",\"vm1_vcpu_ms\":%s,\"vm2_vcpu_ms\":%s,\"qemu_other_ms\":%s,\"all_ms\":%s,\"all_over_rxe\":%s,\"host_busy_pct\":%s,\"rounds\":%d}",
					sep, kk[1], kk[2], jv(a1, c), jv(a2, c), jv(a3, c), jv(a4, c), jv(Q, nq), jv(a5, c), c
				sep = ","
			}
			delete a1; delete a2; delete a3; delete a4; delete a5
		}
	}' "$hostres"
}

kind_note() {
	local k out=()
	for k in "${kind_list[@]}"; do
		if [[ $k == *@* ]]; then
			local ke=${k#*@}
			out+=("$k = ${k%%@*} with ${ke//@/ } in goroce's commands' environment")
			continue
		fi
		case $k in
		v2) out+=("v2 = \`roce link add g0 type rxe netdev eth0 roce-versions v2\` (sent through a UDP socket with GSO, received with AF_PACKET)") ;;
		v2s) out+=("v2s = \`roce-versions v2 rx-path socket\` (received from the UDP socket with UDP GRO)") ;;
		v2x) out+=("v2x = \`roce-versions v2 rx-path xdp\` (received through an AF_XDP socket that an XDP program feeds)") ;;
		both) out+=("both = \`roce-versions both\` (AF_PACKET both ways, the v2 GID used)") ;;
		esac
	done
	local IFS=';'
	echo "${out[*]}" | sed 's/;/; /g'
}

summary md
echo
if [ -n "$floor" ]; then
	floor_summary md
	echo
	echo "The floors: \`udpfloor\` (bench/cmd/udpfloor) between the same VMs, doing only what any RoCE v2 over the" \
		"kernel's UDP must, each payload copied and CRC-32-checked on both sides. Under write_bw it moves the same" \
		"$bw_n messages of 64 KiB as $pmtu-byte datagrams (a WRITE's packets at path MTU $pmtu), UDP GSO out, UDP GRO in," \
		"one ACK per message back, 8 messages ($((8 * 65536 / pmtu)) datagrams) in flight (perftest's 128 overflow eth0's queue of" \
		"1,000 packets). Under pingpong and send_lat (\`udpfloor -lat${floorflags:+ $floorflags}\`) it makes the same 64-byte round trips, four" \
		"datagrams each (a SEND each way, each ACKed, the ACK $( [[ $floorflags == *-gso=false* ]] && echo "in the same sendmmsg as the next SEND, as a datagram of its own" || echo "and the next SEND as one UDP GSO message, as goroce sends them")), both sides" \
		"busy-polling $(case $floorflags in *-rx=xdp* | *"-rx xdp"*) echo "an AF_XDP socket's receive ring that an XDP program feeds (a load from memory per look, as goroce's rx-path xdp)" ;; *-rx=socket* | *"-rx socket"*) echo "the UDP socket (a recvfrom(2) per look)" ;; *) echo "an AF_PACKET receive ring (a load from memory per look, as goroce's link)" ;; esac), and prints both tools' figures. Nothing else a RoCE stack does. Ratios are of the same round."
	echo
fi
if [ -n "$hostcpu" ]; then
	host_summary md
	echo
	echo "Host CPU per message (-H): each write_bw run was made again with $HMUL× the iterations; what the longer" \
		"run cost more, read on the host ($HOSTCPUS CPUs) from each VM's QEMU (its vCPU thread, and the other threads:" \
		"the main loop's virtio and tap work) and from /proc/stat (all: the host's busy time, everything on it), over the" \
		"$((bw_n * (HMUL - 1))) messages it moved more; host busy: the share of the host's CPUs in use while it did. A stack" \
		"whose host is near $((100 * HOSTCPUS))% busy is bound by the host's CPUs, its rate their count over its \"all\"; one" \
		"below it, by one thread (the busiest vCPU)."
	echo
fi
if [ -n "$capture" ]; then
	# turn_summary: per stack, the medians over the rounds of each side's
	# turnaround and of the wire, from the captured send_lat runs.
	awk -F'\t' "$AWK_MEDIAN"'
	{ k = $2 ($3 == "-" ? "" : " " $3); if (!(k in seen)) { seen[k] = 1; order[++no] = k }
	  n = ++cnt[k]; A[k, n] = $5; B[k, n] = $6; W[k, n] = $7 }
	END {
		print "| send_lat, captured in both VMs (bench/cmd/turnaround) | vm1 (server) turnaround, µs | vm2 (client) turnaround, µs | the wire both ways, µs | runs |"
		print "|---|---|---|---|---|"
		for (i = 1; i <= no; i++) {
			k = order[i]; n = cnt[k]
			for (j = 1; j <= n; j++) { a[j] = A[k, j]; b[j] = B[k, j]; w[j] = W[k, j] }
			printf "| %s | %s | %s | %s | %d |\n", k, range(a, n, "%.0f"), range(b, n, "%.0f"), range(w, n, "%.0f"), n
			delete a; delete b; delete w
		}
	}' "$turns"
	echo
	echo "Each side's turnaround: a message's arrival on its eth0 to its answer's departure (the guest kernel's" \
		"receive after the tap, the program, its send up to the tap); the wire: a side's round trip less both" \
		"turnarounds (the drivers, QEMU, the host's bridge, both ways); medians of each run, then median [range]" \
		"over the runs. Each VM's own clock; runs with tcpdump on both sides' eth0."
	echo
fi
if [ -n "$split" ]; then
	# -T: each run's goroce_turn line (both sides), medians over the rounds.
	for f in "$logdir"/r*-{goroce,floor}*-{pingpong,send_lat}.{server,client}.log; do
		[ -e "$f" ] || continue
		b=${f##*/}
		b=${b#r*-}
		{ grep -h '^goroce_turn:' "$f" || true; } | tail -1 | sed "s|^|${b%.log}\t|"
	done | awk -F'\t' "$AWK_MEDIAN"'
	function mid(q,   p) { split(q, p, "/"); return p[2] }
	{ k = $1; sub(/\.(server|client)$/, "", k); side = ($1 ~ /server$/) ? "vm1 (server)" : "vm2 (client)"
	  key = k SUBSEP side; if (!(key in seen)) { seen[key] = 1; order[++no] = key }
	  n = ++cnt[key]
	  nw = split($2, w, " "); for (i = 1; i < nw; i++) { if (w[i] == "wake") W[key, n] = mid(w[i + 1]); if (w[i] == "path") P[key, n] = mid(w[i + 1]); if (w[i] == "send") S[key, n] = mid(w[i + 1]) } }
	END {
		if (!no) { print "No turnaround split: no run printed one (fewer than 100 round trips, or binaries built without -tags goroce_turn)."; exit }
		print "| turnaround split (-T), per side, medians µs | side | wake | path | send (sendmmsg) | runs |"
		print "|---|---|---|---|---|---|"
		for (i = 1; i <= no; i++) {
			key = order[i]; split(key, kk, SUBSEP); n = cnt[key]
			for (j = 1; j <= n; j++) { a[j] = W[key, j]; b[j] = P[key, j]; c[j] = S[key, j] }
			printf "| %s | %s | %s | %s | %s | %d |\n", kk[1], kk[2], range(a, n, "%.1f"), range(b, n, "%.1f"), range(c, n, "%.1f"), n
			delete a; delete b; delete c
		}
	}'
	echo
	echo "Each side, per round trip: wake, the kernel's timestamp of a message's first frame in the receive ring" \
		"(where tcpdump taps) to the program taking it; path, then to the start of its answer's sendmmsg; send," \
		"the sendmmsg call (the packet leaves during it). Binaries built with -tags goroce_turn; each run's" \
		"medians, then median [range] over the runs."
	echo
fi
echo "Packets the client sent on eth0 in a run, median [min–max], against the least the test needs" \
	"(each message and each ACK of the peer's once, $((65536 / pmtu)) packets per 64 KiB WRITE at path MTU $pmtu; more is" \
	"retransmission): $(summary pkts)."
echo
echo "Measured by \`bench/vm.sh -r $rounds -k ${kinds} -n $pp_n,$lat_n,$bw_n${linkmtu:+ -M $linkmtu}${floor:+ -f}${floorflags:+ -F $floorflags}${capture:+ -c}${split:+ -T}${hostcpu:+ -H}\` at $commit (built with $gover), $started:" \
	"the lab's two QEMU VMs (TCG, 1 vCPU each, Debian 12 kernel 6.1) over the same virtio link, the TCP exchange" \
	"over the management link. rxe: rdma_rxe's rxe0 with rdma-core 44 and perftest 4.5; goroce: a static build" \
	"in both VMs, rdma_rxe unloaded (it holds UDP 4791), the device $(kind_note). Medians [min–max] of $rounds" \
	"round(s); rxe and goroce alternate within each round, rxe first in odd rounds and last in even ones; the ratio" \
	"is goroce's figure over rxe's of the same round. Both sides' path MTU $pmtu (the link's MTU ${linkmtu:-1500})." \
	"Host load average $load_before" \
	"before, $load_after after."

if [ -n "$json" ]; then
	{
		printf '{"commit":"%s","go":"%s","started":"%s","rounds":%d,"kinds":"%s",' "$commit" "$gover" "$started" "$rounds" "$kinds"
		printf '"iterations":{"pingpong":%d,"send_lat":%d,"write_bw":%d},"load_before":"%s","load_after":"%s",' "$pp_n" "$lat_n" "$bw_n" "$load_before" "$load_after"
		printf '"link_mtu":%d,"path_mtu":%d,' "${linkmtu:-1500}" "$pmtu"
		printf '"runs":['
		awk -F'\t' 'function n(x) { return x == "NA" || x == "" ? "null" : x }
		{ printf "%s{\"round\":%d,\"stack\":\"%s\",\"kind\":\"%s\",\"test\":\"%s\",\"value\":%s,\"client_seconds\":%s,\"client_eth0_tx_packets\":%s,\"client_eth0_rx_packets\":%s,\"server_eth0_rx_packets\":%s,\"server_eth0_rx_dropped\":%s,\"server_udp_rcvbuf_errors\":%s,\"counters\":%s,\"host_cpu_seconds\":%s}", (NR > 1 ? "," : ""), $1, $2, $3, $4, n($5), $6, n($7), n($8), n($9), n($10), n($11), $12,
			($13 == "NA" || $13 == "" || $15 == "NA" || $17 == "NA" ? "null" : sprintf("{\"vm1_vcpu\":%s,\"vm1_other\":%s,\"vm2_vcpu\":%s,\"vm2_other\":%s,\"host_busy\":%s}", $13, n($14), $15, n($16), $17)) }' "$results"
		printf '],"summary":['
		summary json
		printf ']'
		if [ -n "$floor" ]; then
			printf ',"floor":['
			floor_summary json
			printf ']'
		fi
		if [ -n "$hostcpu" ]; then
			# -H: each stack's CPU per message, as the table's.
			printf ',"host_cpu":['
			host_summary json
			printf ']'
		fi
		if [ -n "$capture" ]; then
			# -c: each captured run's turnarounds and wire (µs), as the table's.
			printf ',"captures":['
			awk -F'\t' '{ printf "%s{\"round\":%d,\"stack\":\"%s\",\"kind\":\"%s\",\"test\":\"%s\",\"turnaround_vm1_us\":%s,\"turnaround_vm2_us\":%s,\"wire_us\":%s,\"turnarounds_vm1\":%d,\"turnarounds_vm2\":%d}", (NR > 1 ? "," : ""), $1, $2, ($3 == "-" ? "" : $3), $4, $5, $6, $7, $8, $9 }' "$turns"
			printf ']'
		fi
		printf '}\n'
	} >"$json"
	log "every run in $json"
fi
if awk -F'\t' '$5 == "NA" { f = 1 } END { exit !f }' "$results" "$longres"; then
	log "some runs failed (— in the table)"
	exit 1
fi
