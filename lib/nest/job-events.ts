import { Observable } from 'rxjs';
import type { JobEvent, PgQueue } from '../engine/index.js';

/**
 * The engine's job events as an Observable (`QueueService.events$`): each subscription is one
 * `onJobEvent` listener, removed on unsubscribe, and it completes when the engine stops (at once
 * for a subscription made after). rxjs lives here, in the Nest layer; the engine has plain
 * listeners. A subscriber that throws is rxjs's to report, as with any Observable.
 */
export function jobEvents$(engine: Pick<PgQueue, 'onJobEvent'>): Observable<JobEvent> {
  return new Observable<JobEvent>((subscriber) =>
    engine.onJobEvent(
      (event) => subscriber.next(event),
      () => subscriber.complete(),
    ),
  );
}
