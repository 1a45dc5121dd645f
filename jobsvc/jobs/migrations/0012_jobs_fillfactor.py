"""Leave a fifth of each page of ``jobs`` free for the new versions of its rows.

A job's row is updated twice or more after its insert (dispatched, started, finished),
and no update is HOT: each changes the predicate of a partial index. With full pages, a
new version goes wherever the free space map finds room, anywhere in the table, so pages
full of long-finished jobs keep changing: autovacuum then reads nearly the whole table
and every index on each pass, and its CPU grows with the table. With room on the page,
the new version stays beside the old one, which pruning frees; pages of finished jobs
stop changing, and vacuum reads only the recent end of the table.

Only pages written from now on get the room; PostgreSQL does not rewrite the table.
"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0011_job_dispatch_partition"),
    ]

    operations = [
        migrations.RunSQL(
            "ALTER TABLE jobs SET (fillfactor = 80)",
            reverse_sql="ALTER TABLE jobs RESET (fillfactor)",
        ),
    ]
