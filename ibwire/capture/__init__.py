"""Capture RDMA traffic from the PF host: device discovery, VF resolution, backends, lifecycle journal.

Background and sources for every mechanism: ../shared/docs/capture-mechanisms.md.
"""
