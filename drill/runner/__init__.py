"""The runner: phases on a monotonic clock, the revert stack, the journal, the watchdog."""
