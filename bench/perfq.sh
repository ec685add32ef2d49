#!/bin/bash
# perfq.sh: `roce perf write -s 4096 -D 3` with -q 1 then -q 64 (issue 15),
# for each of several roce builds, in paired rounds whose build order
# alternates: two network namespaces joined by a veth pair (MTU 1500), a
# goroce device in each (`roce link add ... type rxe netdev`, the default
# roce-versions both: link/afpacket as root). Needs root.
#
#   bench/perfq.sh ROUNDS BIN_A BIN_B ...
#
# Per run it prints the client's MB/s (perf's BW average), the client
# device's retrans_pkts and completer_retry_err, the server's
# rx_drop_socket_full and duplicate_request (`roce stat`, sampled while the
# client runs: each device lives in its perf process) and the 1-minute
# load average. The namespaces are always deleted.
set -u
R=$1; shift; BINS=("$@")
A=pq-a-$$; B=pq-b-$$; D=$(mktemp -d)
cleanup() { ip netns del $A 2>/dev/null; ip netns del $B 2>/dev/null; rm -rf "$D"; }
trap cleanup EXIT
ip netns add $A && ip netns add $B || exit 1
ip link add pqv0 netns $A mtu 1500 type veth peer name pqv1 netns $B mtu 1500 || exit 1
ip -n $A addr add 10.78.0.1/24 dev pqv0; ip -n $B addr add 10.78.0.2/24 dev pqv1
for n in $A $B; do ip -n $n link set lo up; done
ip -n $A link set pqv0 up; ip -n $B link set pqv1 up
mkdir -p $D/a $D/b
ip netns exec $A env GOROCE_RUNDIR=$D/a ${BINS[0]} --rundir $D/a link add pqrxe0 type rxe netdev pqv0 >/dev/null || exit 1
ip netns exec $B env GOROCE_RUNDIR=$D/b ${BINS[0]} --rundir $D/b link add pqrxe1 type rxe netdev pqv1 >/dev/null || exit 1
port=18900
for r in $(seq "$R"); do
	order=("${BINS[@]}")
	if ((r % 2 == 0)); then mapfile -t order < <(printf '%s\n' "${BINS[@]}" | tac); fi
	for BIN in "${order[@]}"; do
		for q in 1 64; do
			port=$((port + 1))
			timeout 40 ip netns exec $A env GOROCE_RUNDIR=$D/a $BIN --rundir $D/a perf write -d pqrxe0 -p $port -s 4096 -q $q -D 3 >$D/s.out 2>$D/s.err &
			sp=$!
			sleep 1
			timeout 40 ip netns exec $B env GOROCE_RUNDIR=$D/b $BIN --rundir $D/b perf write -d pqrxe1 -p $port -s 4096 -q $q -D 3 10.78.0.1 >$D/c.out 2>$D/c.err &
			cp=$!
			: >$D/stat
			: >$D/sstat
			while kill -0 $cp 2>/dev/null; do
				ip netns exec $B $BIN --rundir $D/b stat show pqrxe1 2>/dev/null >$D/stat.new &&
					grep -q "sent_pkts [1-9]" $D/stat.new && cp $D/stat.new $D/stat
				ip netns exec $A $BIN --rundir $D/a stat show pqrxe0 2>/dev/null >$D/sstat.new &&
					grep -q "rcvd_pkts [1-9]" $D/sstat.new && cp $D/sstat.new $D/sstat
				sleep 0.2
			done
			wait $cp; crc=$?; wait $sp
			bw=$(grep -E '^ *4096' $D/c.out | tail -1 | awk '{print $4}')
			rt=$(grep -o 'retrans_pkts [0-9]*' $D/stat | awk '{print $2}')
			cr=$(grep -o 'completer_retry_err [0-9]*' $D/stat | awk '{print $2}')
			sf=$(grep -o 'rx_drop_socket_full [0-9]*' $D/sstat | awk '{print $2}')
			dr=$(grep -o 'duplicate_request [0-9]*' $D/sstat | awk '{print $2}')
			echo "round $r $(basename $BIN) q=$q MBps=${bw:-?} retrans_pkts=${rt:-?} completer_retry_err=${cr:-?} rc=$crc load=$(cut -d' ' -f1 /proc/loadavg) server_rx_drop_socket_full=${sf:-?} server_duplicate_request=${dr:-?}"
			if [ "$crc" != 0 ]; then tail -3 $D/c.err; tail -3 $D/s.err; fi
		done
	done
done
