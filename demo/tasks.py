"""The demo's Python worker module: `python -m tocsin worker tasks:db --queue emails`.

Tasks are registered by name; any runtime can call them with a task envelope
(the C shop and the sqlite3 shell do, see run.sh)."""
import os

import tocsin

db = tocsin.open(os.environ["DEMO_DB"])
emails = db.queue("emails")


@emails.task(name="send_email", retries=2)
def send_email(item, to="customer@example.org"):
    # A real task would talk to a mail server here.
    return {"sent_to": to, "subject": "Your %s is on its way" % item}


@emails.periodic("@every 2s", name="digest")
def digest():
    # fired by whichever worker leads the scheduler, once per boundary
    return {"digest": "sent"}
