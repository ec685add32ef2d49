// Package bench holds goroce's performance benchmarks over a real network:
// two network namespaces joined by a veth pair with MTU 9000, RC traffic
// at path MTU 4096, and beside every goroce figure a raw-UDP baseline
// measured by the same suite in the same run. They need root (namespaces,
// AF_PACKET); see BENCHMARKS.md at the repository root for how to run them
// and what they measured.
package bench
