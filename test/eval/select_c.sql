-- The third table's own reads (run_eval.py --third-table): a range of :range
-- keys of C alone, through its primary key (heap pages in random order, as
-- the joins read A and B).
\set bottom random(0, :rows - :range)
\set top :bottom + :range
SELECT count(*), sum(length(c_value)) FROM c WHERE c_key > :bottom AND c_key < :top;
