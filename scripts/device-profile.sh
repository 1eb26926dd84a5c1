#!/usr/bin/env bash
# Nsight Compute on one kernel launched by an fp4gap command, printing the figures that decide
# a memory-bound or compute-bound kernel's fate: duration, DRAM throughput, achieved occupancy,
# issue activity and the top warp stall reasons. Run on the GPU machine after the gpu build.
#   bash scripts/device-profile.sh KERNEL_REGEX "fp4gap args"
# Clocks are left free (--clock-control none) so durations match the timing harness; caches are
# flushed before the profiled launch (ncu's default), i.e. cold weights as in graph mode.
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/cuda/bin"
kernel="$1"; shift
# shellcheck disable=SC2086
ncu --clock-control none --kernel-name "regex:$kernel" --launch-skip 3 --launch-count 1 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
  --section SchedulerStats --section WarpStateStats \
  --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,smsp__pcsamp_warps_issue_stalled_long_scoreboard,smsp__pcsamp_warps_issue_stalled_barrier,smsp__pcsamp_warps_issue_stalled_wait \
  build/gpu/fp4gap $1 2>&1 \
  | grep -E "^  [a-z_]+.*(decode|prefill|quantize|gemm|kernel)|Duration|DRAM Throughput|Memory Throughput|dram__bytes|lts__t_bytes|Achieved Occupancy|Theoretical Occupancy|Registers Per|Shared Memory Configuration Size|Dynamic Shared|Block Size|Grid Size|Waves Per SM|Issue Slots Busy|No Eligible|Active Warps Per Scheduler|Eligible Warps|Warp Cycles Per Issued|Stall|L2 Hit|Mem Busy|Max Bandwidth|Compute \(SM\)|pcsamp|OPT|Elapsed Cycles|SM Frequency" \
  | head -n 70
