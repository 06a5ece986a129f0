"""Where ingest's parse tasks run: this machine's process pool (local) or a Ray cluster
(ray_pool, with ray_remote on the nodes), behind one run_tasks.
"""
