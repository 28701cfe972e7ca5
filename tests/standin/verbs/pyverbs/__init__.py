"""A stand-in for rdma-core's pyverbs (no RDMA device can run here): the objects the verbs capture backend
uses, with the names and call shapes of pyverbs/*.pyx.  The "device" delivers the Ethernet frames of the pcap
named by STANDIN_VERBS_PCAP into the posted receive buffers, one poll batch at a time, and after the last one
adds STANDIN_VERBS_OOB to the out_of_buffer counter file at STANDIN_VERBS_OOB_FILE, as a NIC that ran out of
posted buffers would."""
