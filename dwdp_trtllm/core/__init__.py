"""The DWDP core: placement, copy plans, expert buffers, transport, copy scheduler, prefetcher, runtime."""
