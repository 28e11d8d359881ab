import { Injectable } from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import type { JobHandlerMetadata } from '../interfaces/index.js';
import { JOB_HANDLER_METADATA } from '../pg-queue.constants.js';

/** Reads the module's metadata; the only place that knows its keys. */
@Injectable()
export class PgQueueMetadataAccessor {
  constructor(private readonly reflector: Reflector) {}

  /** The `@JobHandler()` metadata of a method (the function itself), if it has any. */
  getJobHandlerMetadata(target: Function): JobHandlerMetadata | undefined {
    return this.reflector.get<JobHandlerMetadata | undefined>(JOB_HANDLER_METADATA, target);
  }
}
