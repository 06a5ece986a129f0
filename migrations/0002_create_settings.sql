-- Settings that views read, written from warehouse.toml by every rlwh write
-- (private: BI users read the views, which show the values they used).
create table _rlwh_settings (
  name varchar primary key,
  value varchar not null
);
