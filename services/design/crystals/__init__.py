"""SymmCD crystal generation (design service part): representation.py (asymmetric unit, site symmetries, masked
log-lattice, Wyckoff snapping), data.py (CIF import, built-in set), model.py (the joint diffusion), generate.py
(sampling, baselines, metrics), params.py, jobs.py, api.py (CrystalService), cli.py."""
