/* tslint:disable */
/* eslint-disable */
export * from './AdminApi';
export * from './EventsApi';
export * from './LedgerApi';
export * from './OperationsApi';
export * from './PullApi';
export * from './SubscriptionsApi';
