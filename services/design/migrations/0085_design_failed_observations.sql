-- Issue 36: a measurement that fails (an infeasible sequence) is kept as such, not as a value of 0: value NULL.
-- The suggestion job learns the infeasible region from these rows (gameopt/feasibility.py).
ALTER TABLE design_observations ALTER COLUMN value DROP NOT NULL;
