"""Transmit pipeline: work requests in, MRC packets out on the plane ports.

work requests ► segmenter ► QP scheduler ► path selector ► source router ► header builder
    (+ payload DMA + ICRC) ► plane demux ► one AXI-stream per plane
"""
