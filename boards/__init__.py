"""Board platforms and top levels (MAC/PHY per plane, UART host bridge, on-chip host memory)."""
