"""Host interface: the register file behind AXI4-Lite (and, next, the queues in host memory)."""
