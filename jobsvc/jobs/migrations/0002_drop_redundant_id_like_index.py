"""Drop the ``varchar_pattern_ops`` index Django adds beside a varchar primary key.

The ``id`` column uses the "C" collation, so its primary-key index already serves
``LIKE 'prefix%'``; the extra index only cost a write on every insert and on every
status change (those are not HOT updates: the partial indexes' predicates change).
Django does not track the index in its migration state, so nothing else refers to it.
"""

from django.db import migrations

DROP_LIKE_INDEXES = """
DO $$
DECLARE name text;
BEGIN
    FOR name IN
        SELECT indexname FROM pg_indexes
         WHERE schemaname = current_schema() AND tablename = 'jobs'
           AND indexname LIKE 'jobs_id\\_%\\_like'
    LOOP
        EXECUTE format('DROP INDEX %I', name);
    END LOOP;
END $$;
"""


class Migration(migrations.Migration):
    dependencies = [("jobs", "0001_initial")]

    operations = [migrations.RunSQL(DROP_LIKE_INDEXES, reverse_sql=migrations.RunSQL.noop)]
