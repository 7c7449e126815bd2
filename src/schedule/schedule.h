/* schedule/schedule.h - time for schedules, with no I/O and no state
 * beyond the clock: cron expressions (cron.h), time zones read from the
 * tz database (tz.h), civil dates (civil.h), the slots a schedule fires
 * at (slots.h) and the schedule clock a test can move (clock.h). The
 * layer just above util/: config/ parses schedules with it, the firing
 * (daemon/fire.c) and the adapters' schedule sessions compute with it.
 * No cycle. */
#ifndef TASKMILL_SCHEDULE_H
#define TASKMILL_SCHEDULE_H

#include "schedule/civil.h"
#include "schedule/clock.h"
#include "schedule/cron.h"
#include "schedule/slots.h"
#include "schedule/tz.h"

#endif /* TASKMILL_SCHEDULE_H */
