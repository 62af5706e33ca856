-- The essay's single-row update of table A (Figure 4).
\set key random(1, :rows)
\set new_price random(0, 9)
UPDATE a SET a_price = :new_price WHERE a_key = :key;
