"""A PF host, four VFs and a remote host made of network namespaces and veth pairs, for capture on any Linux.

Nothing leaves the namespaces: every address used lives only inside them.
"""
