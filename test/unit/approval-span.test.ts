/** A9: the yes a call ran under is on its attempt's span: who gave it, and who the identity provider says they are. */
import { approvalAttributes } from '../../activities/observe/attempt';

test('A9: an inbox answer puts its person and their identity on the span; a CLI answer its word; another call’s yes nothing', () => {
  const identity = { issuer: 'https://id.example', subject: 'u-1', email: 'ann@acme.example' };
  expect(
    approvalAttributes({ key: 'j/c2', confirmed: { key: 'j/c2', by: 'ann@acme.example', at: 'now', identity } }),
  ).toEqual({
    'oz0.approval.by': 'ann@acme.example',
    'oz0.approval.issuer': 'https://id.example',
    'oz0.approval.subject': 'u-1',
  });
  expect(approvalAttributes({ key: 'j/c2', confirmed: { key: 'j/c2', by: 'cli:ops', at: 'now' } })).toEqual({
    'oz0.approval.by': 'cli:ops',
  });
  expect(approvalAttributes({ key: 'j/c3', confirmed: { key: 'j/c2', by: 'cli:ops', at: 'now' } })).toEqual({});
  expect(approvalAttributes({ key: 'j/c3' })).toEqual({});
});
