"""The model catalog: the models the engine nodes may run, registered by SREs and admins."""
