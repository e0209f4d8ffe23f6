#include "common/nowait.h"

static _Thread_local bool on, blocked, event;

void nowait_begin(void)
{
	on = true;
	blocked = false;
}

bool nowait_end(void)
{
	bool b = blocked;
	on = false;
	blocked = false;
	return b;
}

bool nowait_on(void)
{
	return on;
}

void nowait_blocked(void)
{
	if (on)
		blocked = true;
}

void nowait_event_thread(void)
{
	/* Called on every request callback: a load and a branch, the store
	 * once per thread (the mark is never cleared: an event thread stays
	 * one until it ends, and a new thread starts unmarked). */
	if (!event)
		event = true;
}

bool nowait_network_refused(void)
{
	if (!on && !event)
		return false;
	nowait_blocked();
	return true;
}
