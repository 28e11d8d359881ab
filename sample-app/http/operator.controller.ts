import { Body, Controller, Get, Headers, HttpCode, Param, Post, Query } from '@nestjs/common';
import { QueueService, type DeadJobPage, type EngineStats, type ReplayOutcome } from '../../lib/index.js';
import { bodyObject, operatorNote, optionalNumber, queryString } from './operator-request.js';
import { jobNotFound } from './job-not-found.js';

/**
 * What an admin UI needs, each endpoint one `QueueService` call. The queue's refusals (a replay
 * of a job that is not dead, a cancel of a finished job, an unknown queue, a bad cursor) become
 * 400/404/409 with the queue's code and message in `PgQueueExceptionFilter`, so nothing here catches.
 * Protect these routes in a real application: they change jobs.
 */
@Controller()
export class OperatorController {
  constructor(private readonly queue: QueueService) {}

  /** Dead jobs, oldest first: `?queue=&errorCode=&limit=&cursor=`; pass `nextCursor` back for the next page. */
  @Get('dead')
  listDead(@Query() query: Record<string, unknown>): Promise<DeadJobPage> {
    return this.queue.listDead({
      queue: queryString(query, 'queue'),
      errorCode: queryString(query, 'errorCode'),
      limit: optionalNumber(queryString(query, 'limit'), 'limit'),
      cursor: queryString(query, 'cursor'),
    });
  }

  /** Replays a dead job in place (same id, history kept): `{ "reason": "…" }`. 409 `JOB_NOT_DEAD` otherwise. */
  @Post('jobs/:id/replay')
  @HttpCode(200)
  async replay(@Param('id') id: string, @Body() body: unknown, @Headers('x-actor') actor?: string): Promise<{ id: string; replayed: true }> {
    await this.queue.replay(id, operatorNote(body, actor));
    return { id, replayed: true };
  }

  /** Replays a queue's dead jobs, optionally of one error code: `{ "errorCode"?, "limit"?, "reason" }`. */
  @Post('queues/:name/dead/replay')
  @HttpCode(200)
  replayDead(@Param('name') queue: string, @Body() body: unknown, @Headers('x-actor') actor?: string): Promise<ReplayOutcome[]> {
    const fields = bodyObject(body);
    const errorCode = fields.errorCode === undefined ? undefined : String(fields.errorCode);
    return this.queue.replayDead({ queue, errorCode, limit: optionalNumber(fields.limit, 'limit'), ...operatorNote(body, actor) });
  }

  /** Cancels a scheduled, pending or running job; a running handler is aborted. 409 `JOB_NOT_CANCELLABLE` once finished. */
  @Post('jobs/:id/cancel')
  @HttpCode(200)
  async cancel(@Param('id') id: string, @Body() body: unknown, @Headers('x-actor') actor?: string): Promise<{ id: string; cancelled: true }> {
    await this.queue.cancel(id, operatorNote(body, actor));
    return { id, cancelled: true };
  }

  /** Resolves a dead job without running it (`{ "delete": true }` removes it, recorded in `purges`). */
  @Post('jobs/:id/discard')
  @HttpCode(200)
  async discard(@Param('id') id: string, @Body() body: unknown, @Headers('x-actor') actor?: string): Promise<{ id: string; deleted: boolean }> {
    const deleted = bodyObject(body).delete === true;
    await this.queue.discard(id, { ...operatorNote(body, actor), delete: deleted });
    return { id, deleted };
  }

  /**
   * Stops claims of the queue in every process (running jobs finish): `{ "reason": "…" }`, recorded with
   * the actor in the queue's audit trail (`GET /queues/:name/history`). 404 `QUEUE_NOT_FOUND` for an unknown queue.
   */
  @Post('queues/:name/pause')
  @HttpCode(200)
  async pause(@Param('name') queue: string, @Body() body: unknown, @Headers('x-actor') actor?: string): Promise<{ queue: string; paused: true }> {
    await this.queue.pause(queue, operatorNote(body, actor));
    return { queue, paused: true };
  }

  @Post('queues/:name/resume')
  @HttpCode(200)
  async resume(@Param('name') queue: string, @Body() body: unknown, @Headers('x-actor') actor?: string): Promise<{ queue: string; paused: false }> {
    await this.queue.resume(queue, operatorNote(body, actor));
    return { queue, paused: false };
  }

  /** The queue's pauses and resumes, newest first: who, why, and whether it was paused before. */
  @Get('queues/:name/history')
  queueHistory(@Param('name') queue: string, @Query() query: Record<string, unknown>) {
    return this.queue.queueHistory(queue, { limit: optionalNumber(queryString(query, 'limit'), 'limit'), before: queryString(query, 'before') });
  }

  /** The job's audit trail, oldest first (who replayed or cancelled it, and why, included). */
  @Get('jobs/:id/history')
  async history(@Param('id') id: string) {
    if (!(await this.queue.get(id))) throw jobNotFound(id);
    return this.queue.history(id);
  }

  /** Per queue: jobs per status, oldest claimable and dead ages, paused, slots; listener, pool, database. */
  @Get('stats')
  stats(): Promise<EngineStats> {
    return this.queue.stats();
  }
}
