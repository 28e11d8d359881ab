import { Inject } from '@nestjs/common';
import { getQueueToken } from './queue.handle.js';

/**
 * Injects the `Queue` handle of `name`, registered with `PgQueueModule.registerQueue({ name })`
 * in this module (or one it imports):
 *
 * ```ts
 * constructor(@InjectQueue('emails') private readonly emails: Queue<WelcomeEmail>) {}
 * ```
 *
 * @publicApi
 */
export const InjectQueue = (name: string): ParameterDecorator & PropertyDecorator => Inject(getQueueToken(name));
