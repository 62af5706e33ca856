-- The essay's single-row update of table B (Figure 4).
\set key random(1, :rows)
\set new_price random(0, 9)
UPDATE b SET b_price = :new_price WHERE b_key = :key;
