-- Single-row updates of the third table (run_eval.py --third-table).
\set key random(1, :rows)
\set new_price random(0, 9)
UPDATE c SET c_price = :new_price WHERE c_key = :key;
