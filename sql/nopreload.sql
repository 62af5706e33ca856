-- Without shared_preload_libraries the functions refuse with a hint.
CREATE EXTENSION pg_tsmove;
CREATE TABLE nopreload (id int);
SELECT tsmove.move('nopreload', 'pg_default');
SELECT tsmove.wait(1);
SELECT tsmove.cancel(1);
SELECT * FROM tsmove.job_progress();
DROP TABLE nopreload;
DROP EXTENSION pg_tsmove;
