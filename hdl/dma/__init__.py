"""DMA to host memory over AXI4: payload reads (TX), placement writes (RX)."""
