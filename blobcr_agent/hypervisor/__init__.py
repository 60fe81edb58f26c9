"""The hypervisor side of a checkpoint (libvirt)."""
