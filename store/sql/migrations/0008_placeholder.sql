-- A stand-in for the migration numbered before this branch's (kept out of commits).
SELECT 1;
