-- Whether this login may insert into the table (a table another team owns may not grant it).
SELECT HAS_PERMS_BY_NAME(:qualified_name, 'OBJECT', 'INSERT');
