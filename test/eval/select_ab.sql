-- The essay's merge-join query (Figure 3), one transaction per run.
-- Reads a range of :range keys of A and of B in key order (two primary-key
-- index scans feeding a merge join; the stream's session disables the other
-- plans), keeps about one row in 2 x 10 x 10.  The range on b_key repeats the
-- one on a_key: PostgreSQL does not derive it from a_key = b_key, and without
-- it the scan of B would start at its first key.
\set bottom random(0, :rows - :range)
\set top :bottom + :range
\set a_price random(0, 9)
\set b_price random(0, 9)
SELECT a_key, greatest(a_price, b_price)
  FROM a JOIN b ON a_key = b_key
 WHERE a_key > :bottom AND a_key < :top
   AND b_key > :bottom AND b_key < :top
   AND a_value < b_value
   AND a_price = :a_price
   AND b_price = :b_price
 ORDER BY a_key;
