"""ibwire's RDMA lab: tenant guests running the kernel's Soft-RoCE (rdma_rxe) under QEMU, their NICs taps on a
host bridge that plays a switchdev eswitch, so `ibwire capture --vf N` sees real verbs traffic as a PF host would.

boot: kernel, initramfs, accelerator.  agent: the guest's PID 1 and command mailbox.  lab: up/down/status.
control: run a command in a guest, netem faults, rxe counters.
"""
